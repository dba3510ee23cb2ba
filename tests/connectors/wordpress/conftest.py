"""The session's WordPress site, for the tests in this folder (see ``cases_servers.py``)."""

from cases_servers import wordpress, wordpress_site  # noqa: F401  (fixtures)
