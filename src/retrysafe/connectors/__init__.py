"""Connectors: the code that talks to one external system.

Named instances are declared in the config::

    [connectors.mail]
    type = "email"
    ...

and built with :func:`build_connector`. The types are listed once, in
``_registry.py`` (:data:`CONNECTOR_TYPES`); implementations are imported
lazily so that a job that sends no email never imports the email code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ._registry import CONNECTOR_TYPES
from .base import (
    ABSENT,
    Absent,
    Ambiguous,
    ConnectorBase,
    EffectFailed,
    Evidence,
    Found,
    LookupResult,
    Payload,
)

__all__ = [
    "ABSENT",
    "CONNECTOR_TYPES",
    "Absent",
    "Ambiguous",
    "ConnectorBase",
    "EffectFailed",
    "Evidence",
    "Found",
    "LookupResult",
    "Payload",
    "build_connector",
]


def connector_class(type_name: str) -> type[ConnectorBase]:
    """The class registered as ``type_name``, imported now."""
    try:
        target = CONNECTOR_TYPES[type_name]
    except KeyError:
        known = ", ".join(sorted(CONNECTOR_TYPES))
        raise ConfigError(f"unknown connector type {type_name!r} (known: {known})") from None
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, ConnectorBase) and cls.type_name == type_name):
        raise ConfigError(f"connector type {type_name!r}: {target} is not a connector class")
    return cls


def build_connector(name: str, table: Mapping[str, Any]) -> ConnectorBase:
    """Build the connector instance ``name`` from its config table."""
    type_name = table.get("type")
    if not isinstance(type_name, str):
        raise ConfigError(f"connector {name!r}: missing 'type'")
    return connector_class(type_name).from_config(name, table)
