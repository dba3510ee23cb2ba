"""Wall time of skipping an already-done step, against a bare interpreter start.

Inside a real attempt (created here first, its id passed as
``RETRYSAFE_ATTEMPT_ID`` the way ``retrysafe run`` does), a step is performed
once; then ``retrysafe step NAME --class publish -- true`` is timed on that
done step (it only reads the ledger and prints the evidence) alternately with
``python -c pass`` on the same interpreter. The same is timed in an attempt
of the agent protocol: claimed by ``retrysafe begin``, with only
``RETRYSAFE_HOME`` and the attempt id in the environment (no
``RETRYSAFE_LEDGER``: the ledger comes from the home). Also timed: ``python
-c "from retrysafe.cli import main"`` (click, the command group and the engine,
what the full command line imports before any command), to split start-up into
imports and work.

Both sides run with cached bytecode, as an installed package would: the
children get a private ``PYTHONPYCACHEPREFIX`` and warm-up runs fill it
(``--as-is`` keeps the caller's environment instead).

    python bench/skip_latency.py [--runs 30] [--profile]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import log, machine, median, paired_ratio, verdict, write_json  # noqa: E402

from retrysafe.engine import Engine  # noqa: E402

TARGET = 4.0
CONFIG = """\
[jobs.bench]
key = "bench:{run}"
params = { run = "slug" }
"""


def retrysafe_cmd() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m retrysafe``."""
    script = Path(sys.executable).parent / "retrysafe"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "retrysafe"]


def child_env(home: Path, attempt_id: str, cache: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RETRYSAFE_") or k == "RETRYSAFE_DEBUG"}
    env["RETRYSAFE_HOME"] = str(home)
    env["RETRYSAFE_ATTEMPT_ID"] = attempt_id
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def agent_attempt(home: Path, cache: Path | None) -> str:
    """An attempt claimed by ``retrysafe begin``, as an agent does; its id."""
    import json

    env = child_env(home, "", cache)
    del env["RETRYSAFE_ATTEMPT_ID"]
    proc = subprocess.run([*retrysafe_cmd(), "begin", "bench", "-p", "run=agent", "--json"],
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"retrysafe begin exited {proc.returncode}: {proc.stderr.strip()}")
    attempt_id: str = json.loads(proc.stdout)["attempt_id"]
    return attempt_id


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    return elapsed


def import_profile(cmd: list[str], env: dict[str, str], runs: int = 5,
                   top: int = 25) -> list[dict[str, Any]]:
    """Median cumulative and self import time per module (``-X importtime``), largest first."""
    cum: dict[str, list[int]] = defaultdict(list)
    own: dict[str, list[int]] = defaultdict(list)
    depth: dict[str, int] = {}
    pattern = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "retrysafe", *cmd],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, check=False)
        seen: set[str] = set()
        for line in proc.stderr.splitlines():
            m = pattern.match(line)
            if m and m.group(4) not in seen:
                seen.add(m.group(4))
                own[m.group(4)].append(int(m.group(1)))
                cum[m.group(4)].append(int(m.group(2)))
                depth[m.group(4)] = len(m.group(3)) // 2
    names = sorted(cum, key=lambda name: -median([float(v) for v in cum[name]]))[:top]
    return [{"module": name, "cumulative_ms": median([float(v) for v in cum[name]]) / 1000,
             "self_ms": median([float(v) for v in own[name]]) / 1000, "depth": depth[name]}
            for name in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=30, help="timed runs per command (default 30)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--as-is", action="store_true",
                    help="keep the caller's bytecode settings (e.g. PYTHONDONTWRITEBYTECODE)")
    ap.add_argument("--profile", action="store_true",
                    help="also print the import-time breakdown of the step command")
    ap.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="retrysafe-skip-"))
    try:
        home = work / "home"
        home.mkdir()
        (home / "retrysafe.toml").write_text(CONFIG, "utf-8")
        engine = Engine.open(home)
        try:
            begun = engine.begin("bench", {"run": "skip"})
            assert begun.run is not None and begun.run.attempt is not None
            attempt_id = begun.run.attempt.id
            run_env = begun.run.env()  # what `retrysafe run` hands its command
        finally:
            engine.close()
        cache = None if args.as_is else work / "pycache"
        env = {**child_env(home, attempt_id, cache), **run_env}
        begin_env = child_env(home, agent_attempt(home, cache), cache)
        step = [*retrysafe_cmd(), "step", "publish", "--class", "publish", "--", "true"]
        commands = {"step": (step, env), "begin_step": (step, begin_env),
                    "bare": ([sys.executable, "-c", "pass"], env),
                    "imports": ([sys.executable, "-c", "from retrysafe.cli import main"], env)}
        timed(step, env)  # performs the steps: every later run skips them
        timed(step, begin_env)
        for _ in range(args.warmup):
            for cmd, cmd_env in commands.values():
                timed(cmd, cmd_env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.runs):
            order = list(commands) if i % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(timed(*commands[name]))
        profile = (import_profile(["step", "publish", "--class", "publish", "--", "true"], env)
                   if args.profile else [])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    step_ms = median(times["step"]) * 1000
    begin_step_ms = median(times["begin_step"]) * 1000
    bare_ms = median(times["bare"]) * 1000
    imports_ms = median(times["imports"]) * 1000
    ratio = paired_ratio(times["step"], times["bare"])  # each pair ran back to back
    begin_ratio = paired_ratio(times["begin_step"], times["bare"])
    print(f"skip of a done step, medians of {args.runs} interleaved runs "
          f"({'caller bytecode settings' if args.as_is else 'cached bytecode'}):")
    print(f"  retrysafe step ... -- true   {step_ms:7.1f} ms  (under retrysafe run)")
    print(f"  retrysafe step ... -- true   {begin_step_ms:7.1f} ms  (after retrysafe begin)")
    print(f"  python -c 'from retrysafe.cli import main' {imports_ms:7.1f} ms")
    print(f"  python -c pass               {bare_ms:7.1f} ms")
    print(f"  ratio, run                   {ratio:7.2f}x  ({verdict(ratio, TARGET, False)} "
          f"< {TARGET:g}x)")
    print(f"  ratio, begin                 {begin_ratio:7.2f}x  "
          f"({verdict(begin_ratio, TARGET, False)} < {TARGET:g}x)")
    if profile:
        print("\nimport time of the step command (median of 5, -X importtime):")
        for row in profile:
            indent = "  " * min(int(row["depth"]), 6)
            print(f"  {row['cumulative_ms']:6.1f} ms cumulative {row['self_ms']:5.1f} ms self  "
                  f"{indent}{row['module']}")
    result: dict[str, Any] = {
        "runs": args.runs,
        "bytecode": "as-is" if args.as_is else "cached",
        "step_ms": step_ms,
        "bare_ms": bare_ms,
        "imports_ms": imports_ms,
        "step_all_ms": [t * 1000 for t in times["step"]],
        "bare_all_ms": [t * 1000 for t in times["bare"]],
        "ratio": ratio,
        "ratio_of_medians": step_ms / bare_ms,
        "begin_step_ms": begin_step_ms,
        "begin_step_all_ms": [t * 1000 for t in times["begin_step"]],
        "begin_ratio": begin_ratio,
        "target": TARGET,
        "meets_target": ratio < TARGET and begin_ratio < TARGET,
        "import_profile": profile,
        "machine": machine(),
    }
    write_json(args.json, result)
    log("")
    return 0


if __name__ == "__main__":
    sys.exit(main())
