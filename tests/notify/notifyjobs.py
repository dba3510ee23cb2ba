"""The notification tests' jobs and config (a module of its own, not ``conftest``,
whose name the dashboard tests' fixtures share)."""

from __future__ import annotations

from support import Home

JOBS = """
[jobs.pay]
key = "pay:{n}"
params = { n = "str" }
max_attempts = 2

[jobs.daily]
key = "daily:{occurrence}"
schedule = "0 7 * * *"
tz = "UTC"
params = { occurrence = "occurrence" }
"""


def configure(home: Home, notify: str, jobs: str = JOBS) -> Home:
    """Write ``retrysafe.toml``: the ``[notify]`` tables given and the test jobs."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(notify + "\n" + jobs)
    return home
