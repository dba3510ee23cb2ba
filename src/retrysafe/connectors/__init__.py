"""Connectors: the code that talks to one external system.

Named instances are declared in the config::

    [connectors.mail]
    type = "email"
    ...

and built with :func:`build_connector`. Implementations are imported lazily so
that a job that sends no email never imports the email code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .base import (
    ABSENT,
    Absent,
    Ambiguous,
    Connector,
    ConnectorBase,
    EffectFailed,
    Found,
    LookupResult,
    Payload,
)

__all__ = [
    "ABSENT",
    "CONNECTOR_TYPES",
    "Absent",
    "Ambiguous",
    "Connector",
    "ConnectorBase",
    "EffectFailed",
    "Found",
    "LookupResult",
    "Payload",
    "build_connector",
]

# type name in the config -> "module:Class", imported on first use.
CONNECTOR_TYPES: dict[str, str] = {
    "email": "retrysafe.connectors.email:EmailConnector",
    "git": "retrysafe.connectors.git:GitCommitConnector",
    "git_push": "retrysafe.connectors.git:GitPushConnector",
    "http": "retrysafe.connectors.http:HttpConnector",
    "csv": "retrysafe.connectors.table:CsvTableConnector",
    "sql": "retrysafe.connectors.table:SqlTableConnector",
    "file": "retrysafe.connectors.files:FileConnector",
}


def connector_class(type_name: str) -> type[ConnectorBase]:
    try:
        target = CONNECTOR_TYPES[type_name]
    except KeyError:
        known = ", ".join(sorted(CONNECTOR_TYPES))
        raise ConfigError(f"unknown connector type {type_name!r} (known: {known})") from None
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls: type[ConnectorBase] = getattr(module, class_name)
    return cls


def build_connector(name: str, table: Mapping[str, Any]) -> ConnectorBase:
    """Build the connector instance ``name`` from its config table."""
    type_name = table.get("type")
    if not isinstance(type_name, str):
        raise ConfigError(f"connector {name!r}: missing 'type'")
    return connector_class(type_name).from_config(name, table)
