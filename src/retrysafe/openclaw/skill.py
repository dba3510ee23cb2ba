"""The shipped OpenClaw skill: read it, check its front matter, install it.

OpenClaw loads skills from ``<workspace>/skills/<name>/SKILL.md`` (one agent)
and from its state folder's ``skills/<name>/SKILL.md`` (every agent using that
state: ``$OPENCLAW_STATE_DIR``, else ``~/.openclaw``). Installing writes the
one file atomically, so OpenClaw never reads half a skill, and a failed
install leaves no folder behind.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import HomeNotWritable, InvalidInput
from ..fsio import atomic_write_bytes
from .context import openclaw_state_dir

__all__ = [
    "DESCRIPTION_LIMIT",
    "SKILL_NAME",
    "check_skill",
    "install_skill",
    "parse_front_matter",
    "skill_target",
    "skill_text",
]

SKILL_NAME = "retrysafe"
DESCRIPTION_LIMIT = 160
"""The description is shown in every agent prompt; keep it under this many characters."""


def skill_text() -> str:
    """The SKILL.md shipped inside the package."""
    return (
        resources.files(__package__ or "retrysafe.openclaw")
        .joinpath("SKILL.md")
        .read_text(encoding="utf-8")
    )


def parse_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Split ``text`` into its front matter and body.

    Only the subset OpenClaw's single-line fallback parser reads is accepted:
    one ``key: value`` per line, with ``metadata`` as a one-line JSON object.
    That subset is also valid YAML, so both of OpenClaw's parsers agree.
    Raises :class:`ValueError` naming the first problem.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("SKILL.md must start with a '---' line")
    try:
        end = next(i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---")
    except StopIteration:
        raise ValueError("front matter has no closing '---' line") from None
    fields: dict[str, Any] = {}
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or key != key.strip() or not key or line.startswith((" ", "\t")):
            raise ValueError(f"line {number}: expected 'key: value' at the start of the line")
        if key in fields:
            raise ValueError(f"line {number}: {key!r} is given twice")
        value = value.strip()
        if key == "metadata":
            try:
                fields[key] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: metadata is not one-line JSON: {exc}") from None
        else:
            fields[key] = _scalar(value)
    return fields, "\n".join(lines[end + 1 :])


def _scalar(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def check_skill(text: str) -> dict[str, Any]:
    """Validate the skill's front matter; return it. Raises :class:`ValueError`."""
    fields, body = parse_front_matter(text)
    if fields.get("name") != SKILL_NAME:
        raise ValueError(f"name must be {SKILL_NAME!r}")
    description = fields.get("description")
    if not isinstance(description, str) or not description:
        raise ValueError("description is missing")
    if len(description) >= DESCRIPTION_LIMIT:
        raise ValueError(f"description is {len(description)} characters, limit {DESCRIPTION_LIMIT}")
    metadata = fields.get("metadata")
    requires = (
        metadata.get("openclaw", {}).get("requires", {}) if isinstance(metadata, Mapping) else {}
    )
    if SKILL_NAME not in requires.get("bins", []):
        raise ValueError("metadata.openclaw.requires.bins must list 'retrysafe'")
    if not body.strip():
        raise ValueError("the skill has no body")
    return fields


def skill_target(
    workspace: Path | None,
    global_: bool,
    state_dir: Path | None,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Where :func:`install_skill` writes, without writing anything."""
    if workspace is not None and (global_ or state_dir is not None):
        raise InvalidInput("choose one: --workspace DIR, or --global (the OpenClaw state folder)")
    if workspace is not None:
        base = Path(workspace).expanduser()
        what = "workspace folder"
    elif global_ or state_dir is not None:
        base = Path(state_dir).expanduser() if state_dir else openclaw_state_dir(env)
        what = "OpenClaw state folder"
    else:
        raise InvalidInput("say where to install: --workspace DIR, or --global")
    if not base.is_dir():
        hint = "" if workspace is not None else " (start OpenClaw once, or set OPENCLAW_STATE_DIR)"
        raise InvalidInput(f"{what} {base} does not exist or is not a folder{hint}")
    return base / "skills" / SKILL_NAME / "SKILL.md"


def install_skill(
    workspace: Path | None,
    global_: bool,
    state_dir: Path | None,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Install the shipped skill; return the path of the installed SKILL.md.

    ``workspace``: into ``<workspace>/skills/retrysafe/`` (that agent only).
    ``global_`` or ``state_dir``: into ``<state dir>/skills/retrysafe/``, where
    the state dir is ``state_dir``, else ``$OPENCLAW_STATE_DIR``, else
    ``~/.openclaw`` (every agent using that state).

    Re-installing is harmless: an identical file is left alone, an older one
    replaced. The base folder must exist (:class:`InvalidInput` otherwise); a
    folder that cannot be written raises :class:`HomeNotWritable`, and nothing
    is left half-written.
    """
    target = skill_target(workspace, global_, state_dir, env)
    text = skill_text()
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if target.read_text(encoding="utf-8") == text:
            return target
    created: list[Path] = []
    try:
        for folder in (target.parent.parent, target.parent):
            if not folder.is_dir():
                folder.mkdir()
                created.append(folder)
        atomic_write_bytes(target, text.encode("utf-8"))
    except OSError as exc:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        reason = exc.strerror or type(exc).__name__
        raise HomeNotWritable(f"cannot install the skill into {target.parent}: {reason}") from None
    return target
