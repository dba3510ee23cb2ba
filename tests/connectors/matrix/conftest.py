"""The session's Synapse homeserver, for the tests in this folder (see ``cases_servers.py``)."""

from cases_servers import synapse, synapse_server  # noqa: F401  (fixtures)
