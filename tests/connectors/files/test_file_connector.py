"""The file connector on the real file system, with a real SIGKILLed publisher."""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.files import FileConnector
from retrysafe.errors import ConfigError, InvalidInput

KEY = "weekly-report:2026-W32/publish"


def files(config: dict[str, Any]) -> FileConnector:
    conn = build_connector("site", {"type": "file", **config})
    assert isinstance(conn, FileConnector)
    return conn


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "attempt-1" / "report.html"
    path.parent.mkdir()
    path.write_text("<h1>Week 32</h1>\n")
    return path


@pytest.fixture
def www(tmp_path: Path) -> Path:
    path = tmp_path / "www"
    path.mkdir()
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_publish_copies_atomically_and_lookup_proves_it(artifact: Path, www: Path) -> None:
    """The normal effect: the target appears with the artifact's bytes; evidence is sha + path."""
    conn = files({"target": f"{www}/{{key}}.html"})
    assert conn.effect_class == "publish" and conn.authoritative
    payload = {"source": str(artifact)}
    assert conn.lookup(KEY, payload) == ABSENT

    evidence = conn.execute(KEY, payload)
    target = www / "weekly-report_2026-W32_publish.html"
    assert target.read_bytes() == artifact.read_bytes()
    assert evidence == f"sha256:{sha(artifact)}@{target}"
    assert [p.name for p in www.iterdir()] == [target.name]  # no temporary file left behind
    found = conn.lookup(KEY, payload)
    assert isinstance(found, Found) and found.evidence == evidence
    assert conn.verify(KEY, evidence) and conn.count(KEY) == 1
    # Publishing the same artifact again is the same effect, not a second one.
    assert conn.execute(KEY, payload) == evidence


def test_other_content_at_the_target_is_ambiguous_and_never_clobbered(artifact: Path, www: Path) -> None:
    """A different file at the target blocks with both checksums; only overwrite replaces it."""
    target = www / "report.html"
    target.write_text("someone else's page\n")
    conn = files({"target": str(target)})
    result = conn.lookup(KEY, {"source": str(artifact)})
    assert isinstance(result, Ambiguous)
    assert str(target) in result.reason
    assert sha(target) in result.reason and sha(artifact) in result.reason
    assert "overwrite" in result.reason

    with pytest.raises(EffectFailed, match="already exists with different content"):
        conn.execute(KEY, {"source": str(artifact)})
    assert target.read_text() == "someone else's page\n"
    assert not conn.updatable

    evidence = conn.execute(KEY, {"source": str(artifact), "overwrite": "true"})
    assert target.read_bytes() == artifact.read_bytes()
    assert evidence == f"sha256:{sha(artifact)}@{target}"

    artifact.write_text("<h1>Week 32, corrected</h1>\n")
    allowed = files({"target": str(target), "overwrite": True})
    assert allowed.updatable
    assert allowed.update(KEY, {"source": str(artifact)}).startswith(f"sha256:{sha(artifact)}@")
    assert target.read_bytes() == artifact.read_bytes()
    assert not allowed.verify(KEY, evidence)


def test_unwritable_target_is_a_definite_failure_then_succeeds_after_the_fix(
    artifact: Path, www: Path
) -> None:
    """A target folder that cannot exist (a file is in the way, even for root) fails definitely."""
    blocker = www / "reports"
    blocker.write_text("not a folder\n")
    conn = files({"target": f"{blocker}/week-32.html"})
    with pytest.raises(EffectFailed) as info:
        conn.execute(KEY, {"source": str(artifact)})
    assert "cannot publish" in str(info.value) and "nothing was written" in str(info.value)
    assert "Not a directory" in str(info.value)

    blocker.unlink()
    blocker.mkdir()
    evidence = conn.execute(KEY, {"source": str(artifact)})
    assert (blocker / "week-32.html").read_bytes() == artifact.read_bytes()
    assert evidence.endswith("@" + str(blocker / "week-32.html"))


def test_bad_input_is_rejected_with_a_clear_error(artifact: Path, www: Path) -> None:
    """Missing source, missing file, relative or malformed target, unknown config: clear errors."""
    conn = files({"target": f"{www}/{{key}}.html"})
    with pytest.raises(InvalidInput, match="payload needs 'source'"):
        conn.execute(KEY, {})
    with pytest.raises(InvalidInput, match="is not a readable file"):
        conn.execute(KEY, {"source": str(artifact.parent / "missing.html")})
    with pytest.raises(InvalidInput, match="must be an absolute path"):
        files({"target": "out/{key}.html"}).execute(KEY, {"source": str(artifact)})
    with pytest.raises(InvalidInput, match="unknown placeholder"):
        files({"target": f"{www}/{{week}}.html"}).execute(KEY, {"source": str(artifact)})
    with pytest.raises(InvalidInput, match="no target path"):
        files({}).execute(KEY, {"source": str(artifact)})
    with pytest.raises(ConfigError, match="unknown field"):
        files({"targte": "/x"})
    # validate() says the same before anything is recorded or written.
    with pytest.raises(InvalidInput, match="payload needs 'source'"):
        conn.validate({})
    with pytest.raises(InvalidInput, match="payload 'overwrite' must be true or false"):
        conn.validate({"source": str(artifact), "overwrite": "perhaps"})
    conn.validate({"source": str(artifact)})
    assert list(www.iterdir()) == []


def test_key_derived_names_cannot_leave_the_target_folder(artifact: Path, www: Path) -> None:
    """{key} is made file-name safe: a key full of ../ still lands inside the folder."""
    conn = files({"target": f"{www}/{{key}}-{{key_hash}}-{{name}}"})
    evidence = conn.execute("../../etc/passwd", {"source": str(artifact)})
    [target] = list(www.iterdir())
    assert evidence.endswith(f"@{target}")
    assert target.name.endswith("-report.html") and "/" not in target.name


def test_cli_run_killed_after_publishing_then_rerun_finds_the_file(
    home: Any, artifact: Path, www: Path
) -> None:
    """End to end: SIGKILL right after the copy; the re-run's lookup finds it; one file, done."""
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.site]
        type = "file"
        target = "{www}/{{key}}.html"
        """
    )
    inner = (
        f"{shlex.quote(sys.executable)} -m retrysafe step publish --connector site "
        f"--with source={shlex.quote(str(artifact))}"
    )
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    first = home.run(*run, env={"RETRYSAFE_CRASH_AT": "publish:after-execute"})
    assert first.returncode != 0, first.stdout + first.stderr
    [target] = list(www.iterdir())
    inode = target.stat().st_ino

    second = home.run(*run)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"sha256:{sha(artifact)}@{target}" in second.stdout
    assert [p.stat().st_ino for p in www.iterdir()] == [inode]
    assert home.run(*run).stdout.startswith("done:")
