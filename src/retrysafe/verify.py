"""``verify``: the parent checks the child, independently of what it said.

For a ``done`` outcome every recorded step is checked again: generated
artifacts against their checksums, effects through their stored ``--check``
command or their connector's ``verify``, plus the job's expected artifacts and
acceptance checks, run in the accepted attempt's folder. A generate step that
declared its prompt file has it re-checked against the recorded checksum.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import envvars
from .checks import run_shell_check
from .connectors import build_connector
from .evidence import fields_of
from .folders import AttemptFolder
from .fsio import artifact_problem
from .provenance import prompt_change

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Check", "verify_outcome"]


@dataclass(frozen=True)
class Check:
    subject: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"subject": self.subject, "ok": self.ok, "detail": self.detail}


def verify_outcome(engine: Engine, key: str) -> list[Check]:
    ledger = engine.ledger
    out = ledger.require_outcome(key)
    checks: list[Check] = []
    if out.state != "done":
        checks.append(Check("outcome", False, f"state is {out.state}, not done: {out.reason}"))
    job = engine.config.jobs.get(out.job)
    accepted = ledger.attempt(out.accepted_attempt) if out.accepted_attempt else None
    env = dict(os.environ)
    if accepted is not None and job is not None:
        folder = AttemptFolder(engine.home, job.name, key, accepted.number)
        env.update({envvars.OUTCOME_KEY: key, envvars.ATTEMPT_DIR: str(folder.path),
                    envvars.HOME: str(engine.home), envvars.JOB: job.name})
    steps = ledger.steps(key)
    for step in steps:
        subject = f"step {step.name}" + (f"/{step.item}" if step.item else "")
        if step.state != "done":
            checks.append(Check(subject, False, f"state is {step.state}"))
            continue
        if step.kind == "generate":
            path = Path(step.artifact or "")
            problem = artifact_problem(path, step.checksum)
            if problem:
                checks.append(Check(subject, False, f"artifact {path} {problem}"
                                    f" (recorded {step.checksum})"))
            else:
                checks.append(Check(subject, True, f"artifact {path.name} matches {step.checksum}"))
            fields = fields_of(step.evidence)
            if "prompt" in fields:
                changed = prompt_change(fields)
                checks.append(Check(f"{subject} prompt", changed is None, changed or
                                    f"prompt {fields['prompt']} matches {fields['prompt_sha256']}"
                                    + (f" (model {fields['model']}" if "model" in fields else "")
                                    + (f" {fields['model_version']}" if "model_version" in fields else "")
                                    + (")" if "model" in fields else "")))
        elif step.check:
            got = run_shell_check(step.check, {**env, envvars.STEP_KEY: step.step_key,
                                               envvars.EVIDENCE: step.evidence or ""},
                                  timeout=job.check_timeout if job else None)
            checks.append(Check(subject, got.returncode == 0,
                                "check found the effect" if got.returncode == 0
                                else "check did not finish in time" if got.returncode is None
                                else f"check exited {got.returncode}: effect not found"))
        elif step.connector and step.connector in engine.config.connectors:
            conn = build_connector(step.connector, engine.config.connector_table(step.connector))
            try:
                ok = conn.verify(step.step_key, step.evidence or "")
                detail = "connector verified the evidence" if ok else "connector could not find the evidence"
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                ok, detail = False, f"connector verify failed: {type(exc).__name__}: {exc}"
            checks.append(Check(subject, ok, detail))
        else:
            checks.append(Check(subject, True, f"recorded evidence {step.evidence!r} "
                                               "(no independent check declared)"))
    if accepted is not None and job is not None:
        run = engine.run_for(job, accepted)
        # step states and checksums were checked above; add the job's own acceptance
        failed = run.acceptance_problems(steps)
        checks.extend(Check("acceptance", False, p) for p in failed)
        if (job.accept or job.expected_artifacts) and not failed:
            checks.append(Check("acceptance", True, "expected artifacts exist and accept commands pass"))
    return checks
