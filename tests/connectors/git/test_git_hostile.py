"""The git connectors fed careless or hostile input, on real repositories."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import Found, build_connector
from retrysafe.connectors.git import GitCommitConnector, GitPushConnector
from retrysafe.errors import InvalidInput


def committer(repo: Path, **extra: Any) -> GitCommitConnector:
    conn = build_connector("notes", {"type": "git", "repo": str(repo), "branch": "main", **extra})
    assert isinstance(conn, GitCommitConnector)
    return conn


def test_cli_paths_are_literal_never_patterns_or_pathspec_magic(repos: Any, home: Any) -> None:
    """'a[1].md', '*.md' and ':!README.md' name files, not patterns: nobody else's edits go in."""
    work = repos.work
    for name in ("a[1].md", "a1.md", "z.txt"):
        (work / name).write_text("first\n")
    repos.git(work, "add", ".")
    repos.git(work, "commit", "-q", "-m", "Files")
    for name in ("a[1].md", "a1.md", "z.txt"):
        (work / name).write_text("edited by hand\n")
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.notes]
        key = "notes:{{n}}"
        params = {{ n = "str" }}

        [connectors.notes]
        type = "git"
        repo = "{work}"
        branch = "main"
        """
    )
    rs = f"{shlex.quote(sys.executable)} -m retrysafe"
    inner = f"{rs} step commit --connector notes --with 'paths=a[1].md' --with message=One"
    done = home.run("run", "notes", "-p", "n=1", "--", "sh", "-c", inner)
    assert done.returncode == 0, done.stdout + done.stderr
    [sha] = repos.keyed(work, "main", "notes:1/commit")
    assert repos.git(work, "show", "--name-only", "--format=", sha) == "a[1].md"

    inner = f"{rs} step commit --connector notes --with 'paths=:!README.md' --with message=Two"
    refused = home.run("run", "notes", "-p", "n=2", "--", "sh", "-c", inner)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert repos.git(work, "rev-parse", "HEAD") == sha
    assert sorted(repos.git(work, "status", "--porcelain").splitlines()) == [" M a1.md", " M z.txt"]


def test_a_message_carrying_its_own_key_trailer_is_refused(repos: Any) -> None:
    """A message copied from an earlier commit would make the new one claim that key too."""
    work = repos.work
    (work / "w.md").write_text("w\n")
    conn = committer(work)
    for message in ("Copy\n\nRetrysafe-Key: other/commit", "Copy\n\nretrysafe-key : other/commit"):
        with pytest.raises(InvalidInput, match="own 'Retrysafe-Key:' line"):
            conn.validate({"paths": "w.md", "message": message})
    head = repos.git(work, "rev-parse", "HEAD")
    with pytest.raises(InvalidInput):
        conn.execute("mine/commit", {"paths": "w.md", "message": "Copy\n\nRetrysafe-Key: other/commit"})
    assert repos.git(work, "rev-parse", "HEAD") == head
    # A body that only mentions a key is fine.
    sha = conn.execute("mine/commit", {"paths": "w.md", "message": "See Retrysafe-Key: other/commit"})
    assert conn.lookup("other/commit", {}) != Found(sha, {"ref": "main", "count": 1})
    assert conn.count("other/commit") == 0


def test_a_key_with_leading_spaces_is_found_as_git_wrote_it(repos: Any) -> None:
    """git trims a trailer's value; the lookup must still find the commit, never make a second."""
    work = repos.work
    conn = committer(work, allow_empty=True)
    key = "  weekly:2026-W32/commit"
    sha = conn.execute(key, {"paths": "README.md", "message": "Checkpoint"})
    assert conn.lookup(key, {}) == Found(sha, {"ref": "main", "count": 1})
    assert conn.execute(key, {"paths": "README.md", "message": "Checkpoint"}) == sha
    assert conn.count(key) == 1


@pytest.mark.parametrize("branch", ["a b", "x:y", "main..x", "@{-1}", "-x"])
def test_a_branch_name_git_cannot_store_is_input_error_not_an_unclear_push(
    repos: Any, branch: str
) -> None:
    """Refused before anything is recorded, instead of a push 'ended unclearly' left unknown."""
    table = {"type": "git_push", "repo": str(repos.work), "branch": branch}
    pusher = build_connector("notes-push", table)
    assert isinstance(pusher, GitPushConnector)
    with pytest.raises(InvalidInput, match="not a valid branch name"):
        pusher.validate({})
    with pytest.raises(InvalidInput, match="not a valid branch name"):
        committer(repos.work).validate({"paths": "README.md", "message": "m", "branch": branch})
