"""A job that performs one effect through a connector, for crash tests.

Run: ``python effect_child.py SPEC.json`` where the spec names the connector
(``type``, ``config``), the ``step_key`` and ``payload``. The program looks
before acting, as a retry-safe job does: when ``lookup`` finds the effect it
writes ``{"found": evidence}`` to ``out``; otherwise it calls ``execute``.
With ``kill_after_execute`` it SIGKILLs itself the moment ``execute`` returns,
so the evidence is never recorded anywhere: exactly the crash window between
"the external system changed" and "we wrote down that it did". Otherwise it
writes ``{"executed": evidence}``; an exception is written as ``{"error": ...}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any


def spawn(spec: dict[str, Any], workdir: Path, timeout: float = 60) -> tuple[int, Any]:
    """Run this program on ``spec``; return its exit code and what it wrote (or None)."""
    import retrysafe

    run_id = uuid.uuid4().hex[:8]
    spec_path, out = workdir / f"spec-{run_id}.json", workdir / f"out-{run_id}.json"
    spec_path.write_text(json.dumps({**spec, "out": str(out)}))
    # The child imports the same retrysafe the tests do, installed or not.
    package_root = str(Path(next(iter(retrysafe.__path__))).parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run([sys.executable, __file__, str(spec_path)], env=env, timeout=timeout)
    return proc.returncode, json.loads(out.read_text()) if out.exists() else None


def main() -> None:
    from retrysafe.connectors import Found, build_connector

    spec = json.loads(Path(sys.argv[1]).read_text())
    out = Path(spec["out"])
    connector = build_connector("under-test", {"type": spec["type"], **spec["config"]})
    try:
        if spec.get("look_first", True):
            result = connector.lookup(spec["step_key"], spec["payload"])
            if isinstance(result, Found):
                out.write_text(json.dumps({"found": result.evidence}))
                return
        evidence = connector.execute(spec["step_key"], spec["payload"])
    except Exception as exc:
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    if spec.get("kill_after_execute"):
        os.kill(os.getpid(), signal.SIGKILL)
    out.write_text(json.dumps({"executed": evidence}))


if __name__ == "__main__":
    main()
