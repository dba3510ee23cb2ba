"""Generation provenance (seed 002: keep the prompt, the model version and the draft
before delivery).

``retrysafe generate --prompt FILE --model NAME --model-version V`` declares what
the generator was given. Before the generator runs, the prompt file is
checksummed and a copy kept in the attempt folder (``NAME.prompt``); the
declared inputs become named fields of the generate step's evidence (whose
value stays the artifact's checksum), so ``status`` shows them with the
artifact, and ``verify`` re-checks the prompt file against its checksum.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from . import envvars
from .errors import InvalidInput
from .evidence import FieldValue
from .fsio import atomic_copy, sha256_file

__all__ = ["declared_inputs", "prompt_change"]


def declared_inputs(prompt: str | None, model: str | None, model_version: str | None,
                    env: Mapping[str, str], keep_in: Path, name: str) -> dict[str, FieldValue]:
    """The generator's declared inputs as evidence fields; flags win over the environment
    (``RETRYSAFE_MODEL``, ``RETRYSAFE_MODEL_VERSION``). A prompt file that cannot be read
    is refused (:class:`InvalidInput`) before anything is recorded."""
    fields: dict[str, FieldValue] = {}
    model = model or env.get(envvars.MODEL) or None
    model_version = model_version or env.get(envvars.MODEL_VERSION) or None
    if model:
        fields["model"] = model
    if model_version:
        fields["model_version"] = model_version
    if prompt:
        path = Path(prompt).absolute()
        if not path.is_file():
            raise InvalidInput(f"--prompt {prompt}: no such file")
        try:
            digest = sha256_file(path)
            copy = keep_in / f"{name}.prompt"
            atomic_copy(path, copy)
        except OSError as exc:
            raise InvalidInput(f"--prompt {prompt}: cannot read it: {exc.strerror}") from None
        fields.update(prompt=str(path), prompt_sha256=digest, prompt_copy=str(copy))
    return fields


def prompt_change(fields: Mapping[str, FieldValue]) -> str | None:
    """Why the recorded prompt file no longer is the one the generator was given
    (``None``: unchanged, or no prompt was declared)."""
    prompt, recorded = fields.get("prompt"), fields.get("prompt_sha256")
    if not isinstance(prompt, str) or not isinstance(recorded, str):
        return None
    kept = f"; the prompt used is kept at {fields['prompt_copy']}" if fields.get("prompt_copy") else ""
    path = Path(prompt)
    if not path.is_file():
        return f"prompt file {prompt} is gone{kept}"
    now = sha256_file(path)
    if now != recorded:
        return f"prompt file {prompt} changed since generation (recorded {recorded}, now {now}){kept}"
    return None
