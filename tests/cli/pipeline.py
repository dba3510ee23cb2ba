"""A pipeline with a generate step and three effect steps against a file-based
external system the test owns: each effect appends a line tagged with its step
key; each lookup greps for it."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from support import Home

EFFECT = r'''
import os, sys, time, uuid
system, ext = sys.argv[1], os.environ["EXT"]
key = os.environ["RETRYSAFE_STEP_KEY"]
if os.environ.get("EFFECT_FAIL") == system:
    print("permission denied", file=sys.stderr); sys.exit(75)
delay = float(os.environ.get("EFFECT_SLEEP", "0"))
pid_file = os.environ.get("EFFECT_PIDFILE")
body = open(sys.argv[2]).read().splitlines()[0] if len(sys.argv) > 2 else ""
pid = f"{system}-{uuid.uuid4().hex[:8]}"
with open(os.path.join(ext, system + ".log"), "a") as fh:
    fh.write(f"{key}\t{pid}\t{body}\n")
    fh.flush(); os.fsync(fh.fileno())
# written once the effect has landed: a test that stops or kills the process group
# when the file appears harms it during the slow part, never between the two writes
if pid_file and system == os.environ.get("EFFECT_SLOW", system):
    open(pid_file, "w").write(str(os.getpgrp()))
if system == os.environ.get("EFFECT_SLOW", ""):
    time.sleep(delay)
print(pid)
'''

LOOKUP = r'''
import os, sys
system, ext = sys.argv[1], os.environ["EXT"]
key = os.environ["RETRYSAFE_STEP_KEY"]
try:
    lines = open(os.path.join(ext, system + ".log")).read().splitlines()
except FileNotFoundError:
    lines = []
found = [ln.split("\t")[1] for ln in lines if ln.split("\t")[0] == key]
for f in found:
    print(f)
sys.exit(0 if found else 1)
'''

GENERATE = r'''
import os, uuid
with open(os.path.join(os.environ["EXT"], "generator.log"), "a") as fh:
    fh.write("call\n")
with open(os.environ["RETRYSAFE_OUTPUT"], "w") as fh:
    fh.write(f"draft {uuid.uuid4().hex}\nbody\n")
'''


@dataclass
class Pipeline:
    home: Home
    ext: Path
    script: Path
    key: str = "content:2026-W32"

    def count(self, system: str) -> int:
        try:
            lines = (self.ext / f"{system}.log").read_text().splitlines()
        except FileNotFoundError:
            return 0
        return sum(1 for ln in lines if ln.startswith(self.key + "/") or ln == "call")

    def bodies(self) -> set[str]:
        out = set()
        for system in ("publish", "row", "notify"):
            for ln in (self.ext / f"{system}.log").read_text().splitlines():
                out.add(ln.split("\t")[2])
        return out

    def run(self, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        return self.home.run("run", "content", "-p", "week=2026-W32", "--", str(self.script),
                             env=env)

    def popen(self, env: dict[str, str] | None = None, **kw: object):  # type: ignore[no-untyped-def]
        return self.home.popen("run", "content", "-p", "week=2026-W32", "--", str(self.script),
                               env=env, **kw)


def make_pipeline(home: Home, tmp: Path, lease: int = 30) -> Pipeline:
    tools, ext = tmp / "tools", tmp / "ext"
    tools.mkdir()
    ext.mkdir()
    for name, code in (("effect.py", EFFECT), ("lookup.py", LOOKUP), ("generate.py", GENERATE)):
        (tools / name).write_text(code)
    py = shlex.quote(sys.executable)
    rs = f"{py} -m retrysafe"
    eff, look = f"{py} {tools / 'effect.py'}", f"{py} {tools / 'lookup.py'}"
    lines = ["#!/bin/sh", "set -e",
             f"draft=$({rs} generate draft --output draft.md -- {py} {tools / 'generate.py'})"]
    for system, cls in (("publish", "publish"), ("row", "publish"), ("notify", "message")):
        lines.append(f"{rs} step {system} --class {cls} --check '{look} {system}' -- "
                     f"{eff} {system} \"$draft\"")
    script = tools / "pipeline.sh"
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(f"""
        [jobs.content]
        key = "content:{{week}}"
        params = {{ week = "isoweek" }}
        max_attempts = 10
        lease_seconds = {lease}
        expected_artifacts = ["draft.md"]
    """)
    home.env["EXT"] = str(ext)
    return Pipeline(home, ext, script)


