"""Effect classes and the retry policy each one gets by default.

The defaults follow one rule: the harder an effect is to undo, the more proof
retrysafe wants before doing it again.

=============  ========================  =================  ==========  ============
class          retry after definite      after ``unknown``  approval    lookup first
               failure (nothing happened)
=============  ========================  =================  ==========  ============
read           yes                       re-execute         no          no
local_write    yes                       re-execute         no          no
git_commit     yes                       lookup required    no          no
message        yes                       lookup required    no          yes
publish        yes                       lookup required    no          yes
payment        yes                       lookup required    yes         yes
delete         no (blocked)              lookup required    yes         yes
=============  ========================  =================  ==========  ============

"Lookup required" means: with a lookup (a connector or a ``--check``
command) the lookup decides; without one the step goes ``blocked`` and a
human resolves it. "Lookup first": when the step has a lookup, it is asked
before the *first* execution too, so an effect made by a lost ledger, another
home or a run before retrysafe was adopted is found instead of repeated (one
lookup per new step; see docs/performance.md). Every cell can be changed per
job in the config::

    [jobs.pay-invoice.classes.payment]
    approval = false
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from .errors import ConfigError, InvalidInput

__all__ = ["DEFAULT_POLICIES", "EffectClass", "OnUnknown", "Policy", "parse_class", "policy_for"]


class EffectClass(StrEnum):
    READ = "read"
    LOCAL_WRITE = "local_write"
    GIT_COMMIT = "git_commit"
    MESSAGE = "message"
    PUBLISH = "publish"
    PAYMENT = "payment"
    DELETE = "delete"


class OnUnknown(StrEnum):
    REEXECUTE = "re-execute"
    LOOKUP = "lookup"
    BLOCK = "block"


class Policy(NamedTuple):
    """What the engine may do on its own for one effect class (a named tuple: no
    ``dataclasses`` import on the command line's path)."""

    retry_failed: bool
    on_unknown: OnUnknown
    approval: bool
    lookup_first: bool = False

    def intent_first(self, asks_lookup: bool) -> bool:
        """Does a step never seen go straight to its intent (no approval to wait for, no
        lookup to ask first, ``asks_lookup``: one that can find something is given)?"""
        return not self.approval and not (self.lookup_first and asks_lookup)


_C = EffectClass
DEFAULT_POLICIES: Mapping[EffectClass, Policy] = {
    _C.READ: Policy(retry_failed=True, on_unknown=OnUnknown.REEXECUTE, approval=False),
    _C.LOCAL_WRITE: Policy(retry_failed=True, on_unknown=OnUnknown.REEXECUTE, approval=False),
    _C.GIT_COMMIT: Policy(retry_failed=True, on_unknown=OnUnknown.LOOKUP, approval=False),
    _C.MESSAGE: Policy(retry_failed=True, on_unknown=OnUnknown.LOOKUP, approval=False,
                       lookup_first=True),
    _C.PUBLISH: Policy(retry_failed=True, on_unknown=OnUnknown.LOOKUP, approval=False,
                       lookup_first=True),
    _C.PAYMENT: Policy(retry_failed=True, on_unknown=OnUnknown.LOOKUP, approval=True,
                       lookup_first=True),
    _C.DELETE: Policy(retry_failed=False, on_unknown=OnUnknown.LOOKUP, approval=True,
                      lookup_first=True),
}


def parse_class(name: str) -> EffectClass:
    """The effect class called ``name``, or a clear error listing the valid ones."""
    if type(name) is EffectClass:
        return name  # already one (every effect passes here)
    try:
        return EffectClass(name)
    except ValueError:
        valid = ", ".join(c.value for c in EffectClass)
        raise InvalidInput(f"unknown effect class {name!r} (valid: {valid})") from None


def parse_overrides(job: str, table: Mapping[str, Any]) -> dict[EffectClass, Policy]:
    """Read a job's ``[jobs.NAME.classes.CLASS]`` tables into full policies."""
    out: dict[EffectClass, Policy] = {}
    for cls_name, fields in table.items():
        try:
            cls = EffectClass(cls_name)
        except ValueError:
            raise ConfigError(f"job {job!r}: unknown effect class {cls_name!r} in classes") from None
        if not isinstance(fields, Mapping):
            raise ConfigError(f"job {job!r}: classes.{cls_name} must be a table")
        policy = DEFAULT_POLICIES[cls]
        for field, value in fields.items():
            if field in ("retry_failed", "approval", "lookup_first"):
                if not isinstance(value, bool):
                    raise ConfigError(f"job {job!r}: classes.{cls_name}.{field} must be true or false")
                if field == "retry_failed":
                    policy = policy._replace(retry_failed=value)
                elif field == "approval":
                    policy = policy._replace(approval=value)
                else:
                    policy = policy._replace(lookup_first=value)
            elif field == "on_unknown":
                try:
                    policy = policy._replace(on_unknown=OnUnknown(value))
                except ValueError:
                    valid = ", ".join(o.value for o in OnUnknown)
                    raise ConfigError(
                        f"job {job!r}: classes.{cls_name}.on_unknown must be one of {valid}"
                    ) from None
            else:
                raise ConfigError(f"job {job!r}: unknown field classes.{cls_name}.{field}")
        out[cls] = policy
    return out


def policy_for(cls: EffectClass, overrides: Mapping[EffectClass, Policy] | None = None) -> Policy:
    if overrides and cls in overrides:
        return overrides[cls]
    return DEFAULT_POLICIES[cls]
