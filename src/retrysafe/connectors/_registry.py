"""The connector types, by the name a config gives in ``type = "..."``.

This table is the one place a type name is written. It names each class by
module and class name, so a job imports only the connector it uses (a job
that sends no email never imports the email code). A class learns its
``type_name`` from here when it is defined (:func:`registered_name`).
"""

from __future__ import annotations

__all__ = ["CONNECTOR_TYPES", "registered_name"]

# type name in the config -> "module:Class", imported on first use.
CONNECTOR_TYPES: dict[str, str] = {
    "email": "retrysafe.connectors.email:EmailConnector",
    "git": "retrysafe.connectors.git:GitCommitConnector",
    "git_push": "retrysafe.connectors.git:GitPushConnector",
    "http": "retrysafe.connectors.http:HttpConnector",
    "csv": "retrysafe.connectors.table:CsvTableConnector",
    "sql": "retrysafe.connectors.table:SqlTableConnector",
    "file": "retrysafe.connectors.files:FileConnector",
    "wordpress": "retrysafe.connectors.wordpress:WordPressConnector",
    "matrix": "retrysafe.connectors.matrix:MatrixConnector",
    "slack": "retrysafe.connectors.slack:SlackConnector",
    "discord": "retrysafe.connectors.discord:DiscordConnector",
    "telegram": "retrysafe.connectors.telegram:TelegramConnector",
    "stripe": "retrysafe.connectors.stripe:StripeConnector",
    "sheets": "retrysafe.connectors.sheets:SheetsConnector",
}

_NAMES = {target: name for name, target in CONNECTOR_TYPES.items()}


def registered_name(cls: type) -> str | None:
    """The type name under which ``cls`` is registered, or ``None``."""
    return _NAMES.get(f"{cls.__module__}:{cls.__qualname__}")
