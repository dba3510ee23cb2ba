"""Crash drills: run a job, kill it at every crash point, check the promise held.

``retrysafe drill JOB -- CMD`` (see :mod:`retrysafe.cli.drill`) drives
:class:`Drill`. Drills perform real effects: point them at test targets.
"""

from __future__ import annotations

from .core import Drill, DrillReport
from .plan import POINT_SETS, StepInfo, TrialPlan
from .report import render_table
from .trial import TrialResult

__all__ = ["POINT_SETS", "Drill", "DrillReport", "StepInfo", "TrialPlan", "TrialResult",
           "render_table"]
