#!/usr/bin/env python3
"""The three fault points of the timeout story (seed 002), run for real.

    python3 fault_points.py SERVERS [--write README]

Against the servers ``servers.py serve SERVERS`` started, in a fresh home of
its own, for each fault point: one run of the pipeline killed there
(``RETRYSAFE_CRASH_AT``), the posts, rows and messages carrying its step keys
counted in WordPress, the sheet and the Matrix room, then one re-run with the
same key and the counts again. Each fault point is an outcome of its own (a
target of its own), so earlier runs on the same servers do not count.

Prints the Markdown table; ``--write README`` puts it between the
``fault-points`` markers of that file instead.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import servers as systems

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
OCCURRENCE = "2026-11-30T0900"
BEGIN = "<!-- fault-points:begin (written by real/fault_points.py) -->"
END = "<!-- fault-points:end -->"
STEPS = (("cms", "publish"), ("sheet", "sheet-row"), ("chat", "notify"))


@dataclass(frozen=True)
class FaultPoint:
    story: str
    crash_at: str


FAULT_POINTS = (
    FaultPoint("after generation, before WordPress", "draft:after-record"),
    FaultPoint("after the WordPress draft, before the Sheets write-back", "publish:after-execute"),
    FaultPoint("after the Sheets write-back, before the notification", "sheet-row:after-execute"),
)


@dataclass
class Result:
    point: FaultPoint
    crashed: list[int]
    crashed_state: str
    after: list[int]
    after_state: str
    same_draft: bool
    post_is_draft: bool


def _env(home: Path, servers: dict[str, Any], extra: Mapping[str, str] = {}) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")}
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["RETRYSAFE_HOME"] = str(home)
    return {**env, **systems.secrets_env(servers), **extra}


def _retrysafe(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    exe = BIN / "retrysafe"
    return subprocess.run([str(exe) if exe.exists() else "retrysafe", *args], env=dict(env), cwd=HERE,
                          capture_output=True, text=True, timeout=600, check=False)


def _status(key: str, env: Mapping[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_retrysafe("status", key, "--json", env=env).stdout)
    return data


def _draft(status: dict[str, Any]) -> str | None:
    step = next((s for s in status["steps"] if s["name"] == "draft"), None)
    return Path(step["artifact"]).read_text(encoding="utf-8") if step and step.get("artifact") else None


def _counts(folder: Path, key: str) -> list[int]:
    found = systems.count(folder)
    return [found[system].get(f"{key}/{step}", 0) for system, step in STEPS]


def _post_content(servers: dict[str, Any], key: str) -> str | None:
    import wpserver

    db = wpserver.Database(**servers["wordpress"]["db"])
    # HEX: the client's batch output escapes newlines and tabs
    rows = db.query("SELECT HEX(p.post_content) FROM wp_posts p JOIN wp_postmeta m ON m.post_id = p.ID "
                    f"WHERE m.meta_key = 'retrysafe_key' AND BINARY m.meta_value = {wpserver.quote(key)}")
    return bytes.fromhex(rows[0][0]).decode() if len(rows) == 1 else None


def run_point(folder: Path, home: Path, point: FaultPoint) -> Result:
    """Crash one run at ``point``, count, re-run with the same key, count again."""
    servers = systems.load(folder)
    target = f"seed-{secrets.token_hex(4)}"
    key = f"content-pipeline:{OCCURRENCE}:{target}"
    run = ("run", "content-pipeline", "-p", f"occurrence={OCCURRENCE}", "-p", f"target={target}",
           "--", "./pipeline.sh")
    _retrysafe(*run, env=_env(home, servers, {"RETRYSAFE_CRASH_AT": point.crash_at}))
    crashed_status = _status(key, _env(home, servers))
    crashed = _counts(folder, key)
    rerun = _retrysafe(*run, env=_env(home, servers))
    if rerun.returncode != 0:
        raise RuntimeError(f"the re-run after {point.crash_at} ended {rerun.returncode}: {rerun.stderr}")
    status = _status(key, _env(home, servers))
    first_draft, final_draft = _draft(crashed_status), _draft(status)
    return Result(point, crashed, crashed_status["outcome"]["state"], _counts(folder, key),
                  status["outcome"]["state"],
                  same_draft=first_draft is None or first_draft == final_draft,
                  post_is_draft=_post_content(servers, f"{key}/publish") == final_draft)


def table(results: list[Result]) -> str:
    def counts(values: list[int]) -> str:
        return " / ".join(str(v) for v in values)

    lines = [
        "| # | seed 002 fault point | killed at | after the kill: posts / rows / messages | outcome"
        " | after the re-run: posts / rows / messages | outcome | same draft, and it is the post |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, r in enumerate(results, 1):
        lines.append(f"| {n} | {r.point.story} | `{r.point.crash_at}`"
                     f" | {counts(r.crashed)} | {r.crashed_state} | {counts(r.after)} | {r.after_state}"
                     f" | {'yes' if r.same_draft and r.post_is_draft else 'NO'} |")
    return "\n".join(lines) + "\n"


def write_into(readme: Path, text: str) -> None:
    """Replace what stands between the markers of ``readme`` with ``text``."""
    old = readme.read_text(encoding="utf-8")
    start, end = old.index(BEGIN) + len(BEGIN), old.index(END)
    readme.write_text(old[:start] + "\n" + text + old[end:], encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--write"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[1]).absolute()
    with tempfile.TemporaryDirectory(prefix="content-faults-") as tmp:
        home = Path(tmp)
        try:
            (home / "retrysafe.toml").write_text(systems.config(folder))
        except systems.ServersError as exc:
            print(f"fault_points.py: {exc}", file=sys.stderr)
            return 2
        text = table([run_point(folder, home, point) for point in FAULT_POINTS])
    if len(argv) == 4:
        write_into(Path(argv[3]), text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
