"""OpenClaw integration: the shipped skill and the run context OpenClaw passes.

See ``docs/openclaw.md``. Nothing here talks to a gateway; OpenClaw calls
retrysafe (a command job, or an agent following the skill), never the reverse.
"""

from __future__ import annotations

from .context import OpenClawContext, detect_context, openclaw_context, openclaw_state_dir
from .skill import SKILL_NAME, check_skill, install_skill, parse_front_matter, skill_text

__all__ = [
    "SKILL_NAME",
    "OpenClawContext",
    "check_skill",
    "detect_context",
    "install_skill",
    "openclaw_context",
    "openclaw_state_dir",
    "parse_front_matter",
    "skill_text",
]
