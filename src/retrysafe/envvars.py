"""Every ``RETRYSAFE_*`` environment variable, named once.

Three kinds: what a user sets to choose where things are (``HOME``,
``CONFIG``, ``LEDGER``; flag > environment > config file > default), what an
attempt hands to the commands it runs (``JOB`` ... ``OUTPUT``), and the
switches of drills and tests (``CRASH_AT``, ``DRILL_*``, ``DEBUG``).
docs/cli.md documents each. :data:`OPENCLAW_MARKS` names what OpenClaw sets
in what it starts, which tells a run started by OpenClaw.
"""

from __future__ import annotations

__all__ = [
    "ATTEMPT",
    "ATTEMPT_DIR",
    "ATTEMPT_ID",
    "CONFIG",
    "CRASH_AT",
    "DEBUG",
    "DRILL_CUT",
    "DRILL_FAIL",
    "DRILL_TRIAL",
    "EVIDENCE",
    "FENCE",
    "HOME",
    "JOB",
    "LEDGER",
    "MODEL",
    "MODEL_VERSION",
    "OUTCOME_KEY",
    "OUTPUT",
    "STEP_KEY",
    "UI_TOKEN",
]

# --- where things are (set by the user) ---
HOME = "RETRYSAFE_HOME"
"""The home folder: runs/, the SQLite ledger, retrysafe.toml."""
CONFIG = "RETRYSAFE_CONFIG"
"""The config file (default: HOME/retrysafe.toml)."""
LEDGER = "RETRYSAFE_LEDGER"
"""The ledger URL (sqlite:///PATH or postgresql://...)."""
UI_TOKEN = "RETRYSAFE_UI_TOKEN"
"""The token of ``retrysafe ui`` (its ``--token``)."""

# --- what an attempt hands to its commands ---
JOB = "RETRYSAFE_JOB"
OUTCOME_KEY = "RETRYSAFE_OUTCOME_KEY"
ATTEMPT = "RETRYSAFE_ATTEMPT"
"""The attempt's number (1, 2, ...)."""
ATTEMPT_ID = "RETRYSAFE_ATTEMPT_ID"
"""The attempt's id: what ``retrysafe step`` attaches to."""
ATTEMPT_DIR = "RETRYSAFE_ATTEMPT_DIR"
FENCE = "RETRYSAFE_FENCE"
"""The attempt's fencing token: it only grows from one attempt to the next, so a provider
that supports conditional writes can refuse a writer whose token is lower than the last
it saw (a stale attempt that was taken over)."""
STEP_KEY = "RETRYSAFE_STEP_KEY"
"""The step key a step command hands to the provider."""
OUTPUT = "RETRYSAFE_OUTPUT"
"""Where a generate command writes its artifact."""
EVIDENCE = "RETRYSAFE_EVIDENCE"
"""The recorded evidence, for a step's ``--check`` run by ``retrysafe verify``."""
MODEL = "RETRYSAFE_MODEL"
"""The model a ``retrysafe generate`` declares (its ``--model``), recorded with the artifact."""
MODEL_VERSION = "RETRYSAFE_MODEL_VERSION"
"""The model version a ``retrysafe generate`` declares (its ``--model-version``)."""

# --- drills and tests ---
CRASH_AT = "RETRYSAFE_CRASH_AT"
"""``STEP:POINT[,...]``: SIGKILL this process there (retrysafe.crash)."""
DRILL_TRIAL = "RETRYSAFE_DRILL_TRIAL"
"""Set by ``retrysafe drill``: the trial id appended to the outcome key (``KEY~ID``)."""
DRILL_FAIL = "RETRYSAFE_DRILL_FAIL"
"""In a drill trial: these steps fail definitely, without running."""
DRILL_CUT = "RETRYSAFE_DRILL_CUT"
"""In a drill trial: these steps run, then their answer is lost."""
DEBUG = "RETRYSAFE_DEBUG"
"""Print the traceback of an internal error."""

# --- set by OpenClaw in what it starts (not ours) ---
OPENCLAW_MARKS = ("OPENCLAW_SHELL", "OPENCLAW_CLI", "OPENCLAW_GATEWAY_PORT", "OPENCLAW_STATE_DIR")
"""Any of these set: OpenClaw started this process (openclaw/context.py reads them); none
set: its context is empty."""
