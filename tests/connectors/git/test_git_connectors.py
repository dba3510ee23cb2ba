"""The git commit and push connectors on real repositories and a bare remote on disk."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from retrysafe.connectors import ABSENT, Ambiguous, EffectFailed, Found, build_connector
from retrysafe.connectors.git import GitCommitConnector, GitPushConnector
from retrysafe.errors import ConfigError, InvalidInput

KEY = "weekly-report:2026-W32/commit"
PUSH_KEY = "weekly-report:2026-W32/push"


def committer(repo: Path, **extra: Any) -> GitCommitConnector:
    conn = build_connector("notes", {"type": "git", "repo": str(repo), "branch": "main", **extra})
    assert isinstance(conn, GitCommitConnector)
    return conn


def pusher(repo: Path, **extra: Any) -> GitPushConnector:
    table = {"type": "git_push", "repo": str(repo), "branch": "main", **extra}
    conn = build_connector("notes-push", table)
    assert isinstance(conn, GitPushConnector)
    return conn


def test_commit_carries_the_trailer_and_only_the_intended_paths(repos: Any) -> None:
    """The normal effect: a commit of exactly the given paths, with Retrysafe-Key; evidence SHA."""
    work = repos.work
    (work / "reports").mkdir()
    (work / "reports" / "w32.md").write_text("# Week 32\n")
    (work / "scratch.txt").write_text("someone's unrelated work\n")
    (work / "README.md").write_text("notes, edited by hand\n")
    (work / "staged.txt").write_text("staged by someone else\n")
    repos.git(work, "add", "staged.txt")
    conn = committer(work)
    assert conn.effect_class == "git_commit" and conn.authoritative
    assert conn.lookup(KEY, {}) == ABSENT

    sha = conn.execute(KEY, {"paths": "reports/w32.md", "message": "Add week 32 report"})
    assert repos.git(work, "rev-parse", "HEAD") == sha
    assert repos.git(work, "show", "--name-only", "--format=", sha) == "reports/w32.md"
    assert repos.git(work, "log", "-1", "--format=%B").endswith(f"Retrysafe-Key: {KEY}")
    # Everything else is exactly as the person left it.
    status = repos.git(work, "status", "--porcelain").splitlines()
    assert sorted(status) == sorted([" M README.md", "A  staged.txt", "?? scratch.txt"])
    assert conn.lookup(KEY, {}) == Found(sha, {"ref": "main", "count": 1})
    assert conn.count(KEY) == 1 and conn.verify(KEY, sha)
    # Executing the same key again is the same commit, not a second one.
    (work / "reports" / "w32.md").write_text("# Week 32, again\n")
    assert conn.execute(KEY, {"paths": "reports/w32.md", "message": "Again"}) == sha
    assert conn.count(KEY) == 1


def test_a_message_quoting_the_key_is_not_mistaken_for_the_trailer(repos: Any) -> None:
    """Lookup reads the trailer, not any text: a body that mentions the key does not match."""
    work = repos.work
    (work / "a.md").write_text("a\n")
    conn = committer(work)
    conn.execute(KEY + "-a", {"paths": ["a.md"], "message": f"About\n\nsee Retrysafe-Key: {KEY}"})
    assert conn.lookup(KEY, {}) == ABSENT


def test_lookup_finds_the_commit_on_the_remote_after_a_fetch(repos: Any) -> None:
    """A fresh clone that never saw the commit locally still finds it on origin."""
    other = repos.clone("other")
    (repos.work / "w32.md").write_text("# Week 32\n")
    sha = committer(repos.work).execute(KEY, {"paths": "w32.md", "message": "Add week 32"})
    repos.git(repos.work, "push", "-q", "origin", "main")

    result = committer(other).lookup(KEY, {})
    assert result == Found(sha, {"ref": "origin/main", "count": 1})


def test_unreachable_remote_makes_a_missing_commit_ambiguous(repos: Any) -> None:
    """No local commit and no way to fetch: lookup says which branch to check for which trailer."""
    shutil.move(repos.remote, repos.root / "moved.git")
    result = committer(repos.work).lookup(KEY, {})
    assert isinstance(result, Ambiguous)
    assert f"Retrysafe-Key: {KEY}" in result.reason
    assert "origin/main" in result.reason and "fetching origin failed" in result.reason


def test_nothing_to_commit_and_wrong_branch_are_definite_failures(repos: Any) -> None:
    """Unchanged paths or a work tree on another branch: EffectFailed, no commit made."""
    work = repos.work
    head = repos.git(work, "rev-parse", "HEAD")
    conn = committer(work)
    with pytest.raises(EffectFailed, match="nothing to commit"):
        conn.execute(KEY, {"paths": "README.md", "message": "No change"})
    repos.git(work, "checkout", "-q", "-b", "feature")
    (work / "w32.md").write_text("x\n")
    with pytest.raises(EffectFailed, match="on branch 'feature', not 'main'"):
        conn.execute(KEY, {"paths": "w32.md", "message": "Add"})
    assert repos.git(work, "rev-parse", "main") == head
    repos.git(work, "checkout", "-q", "main")
    assert committer(work, allow_empty=True).execute(
        KEY, {"paths": "README.md", "message": "Checkpoint"}
    ) == repos.git(work, "rev-parse", "HEAD")


def test_push_puts_the_commit_on_the_remote_and_lookup_proves_it(repos: Any) -> None:
    """The normal push: evidence origin/main@SHA; the remote branch contains the commit."""
    work = repos.work
    (work / "w32.md").write_text("# Week 32\n")
    sha = committer(work).execute(KEY, {"paths": "w32.md", "message": "Add week 32"})
    conn = pusher(work)
    assert conn.effect_class == "publish" and conn.authoritative
    assert conn.lookup(PUSH_KEY, {"commit_key": KEY}) == ABSENT
    assert conn.execute(PUSH_KEY, {"commit_key": KEY}) == f"origin/main@{sha}"
    assert repos.git(repos.remote, "rev-parse", "main") == sha
    assert isinstance(conn.lookup(PUSH_KEY, {"sha": sha}), Found)
    assert conn.verify(PUSH_KEY, f"origin/main@{sha}")


def test_rejected_push_is_a_definite_failure_then_succeeds_after_rebase(repos: Any) -> None:
    """Non-fast-forward: EffectFailed with the reason; after integrating, the push works."""
    other = repos.clone("other")
    (other / "theirs.md").write_text("their change\n")
    repos.git(other, "add", "theirs.md")
    repos.git(other, "commit", "-q", "-m", "Theirs")
    repos.git(other, "push", "-q", "origin", "main")
    theirs = repos.git(other, "rev-parse", "HEAD")

    work = repos.work
    (work / "w32.md").write_text("# Week 32\n")
    committer(work).execute(KEY, {"paths": "w32.md", "message": "Add week 32"})
    conn = pusher(work)
    with pytest.raises(EffectFailed, match="rejected") as info:
        conn.execute(PUSH_KEY, {"commit_key": KEY})
    assert "integrate" in str(info.value)
    assert repos.git(repos.remote, "rev-parse", "main") == theirs

    repos.git(work, "pull", "-q", "--rebase", "origin", "main")
    [rebased] = repos.keyed(work, "main", KEY)
    assert conn.execute(PUSH_KEY, {"commit_key": KEY}) == f"origin/main@{rebased}"
    assert repos.git(repos.remote, "merge-base", "--is-ancestor", theirs, "main") == ""


def test_push_lookup_without_the_remote_is_ambiguous(repos: Any) -> None:
    """If the remote cannot be fetched, the push lookup names the commit to look for."""
    work = repos.work
    sha = repos.git(work, "rev-parse", "HEAD")
    shutil.move(repos.remote, repos.root / "moved.git")
    result = pusher(work).lookup(PUSH_KEY, {})
    assert isinstance(result, Ambiguous)
    assert "cannot fetch origin" in result.reason and sha in result.reason


def test_bad_input_is_rejected_with_a_clear_error(repos: Any, tmp_path: Path) -> None:
    """Missing repo, not a repo, missing message or paths, paths outside, unknown remote."""
    payload = {"paths": "a.md", "message": "Add"}
    with pytest.raises(InvalidInput, match="does not exist"):
        committer(tmp_path / "nowhere").execute(KEY, payload)
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidInput, match="is not a git work tree"):
        committer(tmp_path / "plain").execute(KEY, payload)
    with pytest.raises(InvalidInput, match="must be an absolute path"):
        committer(Path("relative/repo")).execute(KEY, payload)
    conn = committer(repos.work)
    with pytest.raises(InvalidInput, match="needs a 'message'"):
        conn.execute(KEY, {"paths": "a.md"})
    with pytest.raises(InvalidInput, match="names no path"):
        conn.execute(KEY, {"paths": " , ", "message": "Add"})
    with pytest.raises(InvalidInput, match="not a file inside the repository"):
        conn.execute(KEY, {"paths": "../outside.md", "message": "Add"})
    with pytest.raises(EffectFailed, match="pathspec"):
        conn.execute(KEY, {"paths": "missing.md", "message": "Add"})
    with pytest.raises(ConfigError, match="unknown field"):
        committer(repos.work, remote_url="x")
    # validate() says the same before anything is recorded or committed.
    with pytest.raises(InvalidInput, match="does not exist"):
        committer(tmp_path / "nowhere").validate(payload)
    with pytest.raises(InvalidInput, match="not a file inside the repository"):
        conn.validate({"paths": "../outside.md", "message": "Add"})
    conn.validate({"paths": "a.md", "message": "Add"})
    with pytest.raises(InvalidInput, match="no remote named 'backup'"):
        pusher(repos.work, remote="backup").validate({})
    with pytest.raises(InvalidInput, match="no remote named 'backup'"):
        pusher(repos.work, remote="backup").execute(PUSH_KEY, {})
    with pytest.raises(InvalidInput, match="no commit"):
        pusher(repos.work).execute(PUSH_KEY, {"sha": "deadbeef"})


def test_push_to_an_unreachable_remote_is_a_definite_failure(repos: Any) -> None:
    """A remote that does not exist: EffectFailed 'cannot reach', nothing pushed."""
    repos.git(repos.work, "remote", "set-url", "origin", str(repos.root / "gone.git"))
    with pytest.raises(EffectFailed, match="cannot reach origin"):
        pusher(repos.work).execute(PUSH_KEY, {})


def test_cli_run_killed_after_the_commit_then_rerun_finds_it_and_pushes(repos: Any, home: Any) -> None:
    """End to end: SIGKILL after the commit; the re-run finds the trailer and pushes once."""
    work = repos.work
    (work / "w32.md").write_text("# Week 32\n")
    home.path.mkdir(parents=True, exist_ok=True)
    home.config(
        f"""
        [jobs.weekly]
        key = "weekly:{{week}}"
        params = {{ week = "isoweek" }}

        [connectors.notes]
        type = "git"
        repo = "{work}"
        branch = "main"

        [connectors.notes-push]
        type = "git_push"
        repo = "{work}"
        branch = "main"
        """
    )
    rs = f"{shlex.quote(sys.executable)} -m retrysafe"
    inner = (
        f"{rs} step commit --connector notes --with paths=w32.md --with 'message=Add week 32' "
        f"&& {rs} step push --connector notes-push "
        '--with "commit_key=$RETRYSAFE_OUTCOME_KEY/commit"'
    )
    run = ("run", "weekly", "-p", "week=2026-W32", "--", "sh", "-c", inner)
    first = home.run(*run, env={"RETRYSAFE_CRASH_AT": "commit:after-execute"})
    assert first.returncode != 0, first.stdout + first.stderr
    [sha] = repos.keyed(work, "main", "weekly:2026-W32/commit")

    second = home.run(*run)
    assert second.returncode == 0, second.stdout + second.stderr
    assert sha in second.stdout and f"origin/main@{sha}" in second.stdout
    assert repos.keyed(work, "main", "weekly:2026-W32/commit") == [sha]
    assert repos.git(repos.remote, "rev-parse", "main") == sha
