"""The drill's table: one row per trial, step x point -> pass or what failed."""

from __future__ import annotations

from .core import DrillReport

__all__ = ["render_table"]


def render_table(report: DrillReport) -> list[str]:
    """Lines of the table and the verdict."""
    rows = [["#", "STEP", "POINT", "RESULT"]]
    rows += [[str(t.number), t.plan.step, t.plan.point, t.verdict] for t in report.trials]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)), r[3]]).rstrip()
             for r in rows]
    lines.append("")
    for problem in report.problems:
        lines.append(f"problem: {problem}")
    failed = len(report.failed)
    verdict = (f"drill {report.drill_id} of {report.base_key}: {len(report.trials)} trials, "
               f"{len(report.trials) - failed} passed, {failed} failed")
    if report.interrupted:
        verdict += " (interrupted)"
    elif report.problems:
        verdict += "; the job cannot be drilled as it is"
    lines.append(verdict)
    return lines
