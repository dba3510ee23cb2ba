"""``retrysafe demo``: the content pipeline of a timeout story, crashed on purpose.

A draft is generated (different text on every call, like a model), published
to a "CMS", written to a "sheet" row and announced in a "chat" - three
file-based external systems with real lookups. The first run is killed right
after publishing and before recording it; the re-runs must find the post, not
publish it again, and deliver the same draft.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import envvars

_EFFECT = '''\
import os, sys, uuid
system, ext = sys.argv[1], os.environ["DEMO_EXT"]
key = os.environ["RETRYSAFE_STEP_KEY"]
body = open(sys.argv[2]).read().strip().splitlines()[0] if len(sys.argv) > 2 else ""
provider_id = f"{system}-{uuid.uuid4().hex[:8]}"
with open(os.path.join(ext, system + ".log"), "a") as fh:
    fh.write(f"{key}\\t{provider_id}\\t{body}\\n")
print(provider_id)
'''

_LOOKUP = '''\
import os, sys
system, ext = sys.argv[1], os.environ["DEMO_EXT"]
key = os.environ["RETRYSAFE_STEP_KEY"]
try:
    lines = open(os.path.join(ext, system + ".log")).read().splitlines()
except FileNotFoundError:
    lines = []
found = [ln.split("\\t")[1] for ln in lines if ln.split("\\t")[0] == key]
if len(found) > 1:
    print(f"{len(found)} copies of {key}", file=sys.stderr); sys.exit(2)
if found:
    print(found[0]); sys.exit(0)
sys.exit(1)
'''

_GENERATE = '''\
import os, uuid
with open(os.path.join(os.environ["DEMO_EXT"], "generator-calls.log"), "a") as fh:
    fh.write("call\\n")
with open(os.environ["RETRYSAFE_OUTPUT"], "w") as fh:
    fh.write(f"Weekly digest, take {uuid.uuid4().hex[:6]}\\n\\nEverything shipped.\\n")
'''


def _pipeline(py: str, tools: Path) -> str:
    rs = f"{shlex.quote(py)} -m retrysafe"
    eff = f"{shlex.quote(py)} {shlex.quote(str(tools / 'effect.py'))}"
    look = f"{shlex.quote(py)} {shlex.quote(str(tools / 'lookup.py'))}"
    gen = f"{shlex.quote(py)} {shlex.quote(str(tools / 'generate.py'))}"
    return f"""#!/bin/sh
set -e
draft=$({rs} generate draft --output draft.md -- {gen})
{rs} step publish --class publish --check {shlex.quote(look + ' cms')} -- {eff} cms "$draft" >/dev/null
{rs} step sheet-row --class publish --check {shlex.quote(look + ' sheet')} -- {eff} sheet "$draft" >/dev/null
{rs} step notify --class message --check {shlex.quote(look + ' chat')} -- {eff} chat "$draft" >/dev/null
"""


def _count(path: Path, key_prefix: str) -> int:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for ln in lines if ln.startswith(key_prefix))


def self_command() -> list[str]:
    """How to run this retrysafe again from any folder: the full path of the
    ``retrysafe`` executable that is running, else this Python with ``-m retrysafe``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "retrysafe":
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found:
            return [str(Path(found).absolute())]
    return [sys.executable, "-m", "retrysafe"]


def run_demo(keep: Path | None = None) -> int:
    """Run the demo in ``keep`` (kept), or in a temporary home removed at the end."""
    if keep is not None:
        home = keep.absolute()
        home.mkdir(parents=True, exist_ok=True)
        return _run(home, kept=True)
    home = Path(tempfile.mkdtemp(prefix="retrysafe-demo-"))
    try:
        return _run(home, kept=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(home: Path, *, kept: bool) -> int:
    tools, ext = home / "tools", home / "external"
    tools.mkdir(exist_ok=True)
    ext.mkdir(exist_ok=True)
    (tools / "effect.py").write_text(_EFFECT)
    (tools / "lookup.py").write_text(_LOOKUP)
    (tools / "generate.py").write_text(_GENERATE)
    script = tools / "pipeline.sh"
    script.write_text(_pipeline(sys.executable, tools))
    script.chmod(0o755)
    (home / "retrysafe.toml").write_text(
        '[jobs.content]\nkey = "content:{week}:{target}"\n'
        'params = { week = "isoweek", target = "slug" }\nmax_attempts = 5\nlease_seconds = 60\n'
        'expected_artifacts = ["draft.md"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYSAFE_")}
    env.update({envvars.HOME: str(home), "DEMO_EXT": str(ext)})
    base = [sys.executable, "-m", "retrysafe", "run", "content", "-p", "week=2026-W32",
            "-p", "target=blog", "--", str(script)]
    key = "content:2026-W32:blog"
    print(f"retrysafe demo (home {home})\n")
    runs = [
        ("1: killed after publishing, before recording", {envvars.CRASH_AT: "publish:after-execute"}),
        ("2: re-run", {}),
        ("3: re-run again", {}),
    ]
    for title, extra in runs:
        proc = subprocess.run(base, env={**env, **extra}, capture_output=True, text=True, check=False)
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        print(f"run {title}\n    exit {proc.returncode}: {last}")
    print()
    rows = [
        ("draft generated", _count(ext / "generator-calls.log", "call")),
        ("post published (cms)", _count(ext / "cms.log", key)),
        ("sheet row written", _count(ext / "sheet.log", key)),
        ("chat notification sent", _count(ext / "chat.log", key)),
    ]
    ok = True
    for label, count in rows:
        verdict = "once" if count == 1 else f"{count} times  <-- WRONG"
        ok &= count == 1
        print(f"  {label:26} {verdict}")
    bodies = {ln.split("\t")[2] for name in ("cms", "sheet", "chat")
              for ln in (ext / f"{name}.log").read_text().splitlines()} if ok else set()
    same = len(bodies) == 1
    print(f"  {'same draft everywhere':26} {'yes' if same else 'NO  <-- WRONG'}")
    status = subprocess.run([sys.executable, "-m", "retrysafe", "status", key], env=env,
                            capture_output=True, text=True, check=False)
    state = next((ln.split(None, 1)[1] for ln in status.stdout.splitlines()
                  if ln.startswith("state")), "?")
    verify = subprocess.run([sys.executable, "-m", "retrysafe", "verify", key], env=env,
                            capture_output=True, text=True, check=False)
    print(f"  {'final state':26} {state}")
    print(f"  {'verify':26} {'passed' if verify.returncode == 0 else 'FAILED'}")
    ok = ok and same and state == "done" and verify.returncode == 0
    verdict = "one outcome, as intended" if ok else "DEMO FAILED"
    if kept:
        rs = " ".join(shlex.quote(w) for w in self_command())
        print(f"\n{verdict}; to inspect its history, run the next line:")
        print(f"RETRYSAFE_HOME={shlex.quote(str(home))} {rs} history {shlex.quote(key)}")
    else:
        print(f"\n{verdict}; the demo's temporary home was removed "
              "(to look around afterwards: retrysafe demo --keep DIR)")
    return 0 if ok else 1
