"""Git commits and pushes, each its own step.

A commit made by :class:`GitCommitConnector` carries the trailer
``Retrysafe-Key: <step key>``, so the branch history itself says whether the
commit was made: lookup reads the trailers on the target branch (and on the
remote-tracking branch after a fetch). :class:`GitPushConnector` pushes a
commit; its evidence is the remote branch containing that commit, which a
fetch plus ``merge-base --is-ancestor`` proves or disproves.

Both drive the real ``git`` program, so hooks, signing and credentials
behave exactly as they do for the person who owns the repository.

Example config::

    [connectors.notes]
    type = "git"
    repo = "/srv/notes"
    branch = "main"

    [connectors.notes-push]
    type = "git_push"
    repo = "/srv/notes"
    remote = "origin"
    branch = "main"
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ConfigError, ConnectorError, InvalidInput
from ._config import config_bool, optional_str, reject_unknown
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["TRAILER", "GitCommitConnector", "GitPushConnector"]

TRAILER = "Retrysafe-Key"
"""The commit trailer that carries the step key."""

# Prompt-free: a credential prompt would hang an unattended job. Literal pathspecs:
# a path is the file it names, never a pattern (``*.md``, ``a[1].md``) or pathspec
# magic (``:!README``, ``:/``) that would commit other files with it.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_LITERAL_PATHSPECS": "1"}
_TIMEOUT = 120.0

# Phrases git prints when it never reached the remote: nothing can have changed.
_UNREACHABLE = (
    "does not appear to be a git repository",
    "could not read from remote repository",
    "could not resolve host",
    "connection refused",
    "no such remote",
)


@dataclass(frozen=True)
class _Result:
    code: int
    out: str
    err: str


def _git(repo: Path, *args: str, check: bool = True) -> _Result:
    env = {**os.environ, **_GIT_ENV}
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise ConfigError("the git program is not installed or not on PATH") from None
    except subprocess.TimeoutExpired as exc:
        # A hung git may have done its work: the caller must treat this as unknown.
        raise ConnectorError(f"git {args[0]} in {repo} did not finish in {_TIMEOUT:.0f}s") from exc
    result = _Result(proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise ConnectorError(f"git {args[0]} in {repo} failed: {_first_line(result.err)}")
    return result


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal or lines or ["(no message)"])[0]


def _paths(raw: Any) -> list[str]:
    """``paths`` arrive as a TOML/JSON list, or as ``a.txt,b.txt`` from ``--with``."""
    if isinstance(raw, str):
        items = [p.strip() for p in raw.split(",")]
    elif isinstance(raw, Sequence) and all(isinstance(p, str) for p in raw):
        items = [p.strip() for p in raw]
    else:
        raise InvalidInput("payload 'paths' must be a list of paths or a comma-separated string")
    items = [p for p in items if p]
    if not items:
        raise InvalidInput("payload 'paths' names no path to commit")
    return items


class _GitBase(ConnectorBase):
    """What both git connectors share: the repository and the branch."""

    def __init__(
        self,
        name: str,
        *,
        repo: str | None = None,
        branch: str | None = None,
        remote: str | None = None,
        effect_class: str | None = None,
    ) -> None:
        self.name = name
        self.repo = repo
        self.branch = branch
        self.remote = remote
        if effect_class:
            self.effect_class = effect_class

    _fields: ClassVar[set[str]] = {"type", "repo", "branch", "remote", "effect_class"}

    @classmethod
    def _config(cls, name: str, table: Mapping[str, Any]) -> dict[str, Any]:
        where = f"connector {name!r}"
        reject_unknown(where, table, cls._fields)
        fields = ("repo", "branch", "remote", "effect_class")
        return {field: optional_str(where, table, field) for field in fields}

    def _repo(self, payload: Payload) -> Path:
        raw = payload.get("repo", self.repo)
        if not raw or not isinstance(raw, str):
            raise InvalidInput(f"connector {self.name!r}: no repository (set 'repo')")
        path = Path(raw).expanduser()
        if not path.is_absolute():
            raise InvalidInput(f"connector {self.name!r}: repo {raw!r} must be an absolute path")
        if not path.is_dir():
            raise InvalidInput(f"connector {self.name!r}: repository {path} does not exist")
        top = _git(path, "rev-parse", "--show-toplevel", check=False)
        if top.code != 0:
            raise InvalidInput(f"connector {self.name!r}: {path} is not a git work tree")
        return Path(top.out.strip())

    def _branch(self, repo: Path, payload: Payload) -> str:
        raw = payload.get("branch", self.branch)
        if not raw:
            head = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
            if head.code != 0:
                raise InvalidInput(f"{repo}: HEAD is detached; set 'branch'")
            return head.out.strip()
        branch = str(raw)
        # A name git cannot store (``a b``, ``x:y``, ``main..x``) would fail only at the
        # push, as a refspec error that reads like a push cut short.
        ref_ok = _git(repo, "check-ref-format", f"refs/heads/{branch}", check=False).code == 0
        if not ref_ok or branch.startswith("-"):
            raise InvalidInput(f"connector {self.name!r}: {branch!r} is not a valid branch name")
        return branch

    def _remote(self, repo: Path) -> str | None:
        """The configured remote, or ``origin`` when the repository has one."""
        name = self.remote or "origin"
        if _git(repo, "remote", "get-url", name, check=False).code == 0:
            return name
        if self.remote:
            raise InvalidInput(f"{repo} has no remote named {self.remote!r}")
        return None

    def _fetch(self, repo: Path, remote: str, branch: str) -> str | None:
        """Fetch the remote branch; the git error line when that failed."""
        spec = f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"
        res = _git(repo, "fetch", "--quiet", "--no-tags", remote, spec, check=False)
        if res.code == 0:
            return None
        if "couldn't find remote ref" in res.err.lower():
            # The branch does not exist on the remote yet: nothing was pushed.
            _git(repo, "update-ref", "-d", f"refs/remotes/{remote}/{branch}", check=False)
            return None
        return _first_line(res.err)


# A line of a message that git could read as our trailer (any case, spaces before ':').
_OWN_TRAILER = re.compile(rf"^{TRAILER}[ \t]*:", re.IGNORECASE | re.MULTILINE)


def _written(step_key: str) -> str:
    """The key as the trailer holds it: git trims the spaces around a trailer's value."""
    return step_key.strip(" ")


def _has_commit(repo: Path, ref: str) -> bool:
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).code == 0


def _commits_with_key(repo: Path, ref: str, step_key: str) -> list[str]:
    """SHAs on ``ref`` whose ``Retrysafe-Key`` trailer is exactly ``step_key``, oldest first."""
    if not _has_commit(repo, ref):
        return []
    key = _written(step_key)
    # --grep narrows the walk cheaply; the trailer parse below makes it exact
    # (the grep would also match the key quoted in a message body).
    res = _git(
        repo,
        "log",
        ref,
        "--fixed-strings",
        f"--grep={TRAILER}: {key}",
        f"--format=%H%x00%(trailers:key={TRAILER},valueonly,separator=%x01)%x00",
    )
    found = []
    for record in res.out.split("\x00\n"):
        sha, _, values = record.strip("\n").partition("\x00")
        values = values.rstrip("\x00")
        if sha and key in [v.strip(" ") for v in values.split("\x01")]:
            found.append(sha.strip())
    return list(reversed(found))


class GitCommitConnector(_GitBase):
    """Commits the given paths with a ``Retrysafe-Key`` trailer; evidence is the SHA.

    Payload: ``paths`` (list or comma-separated, relative to the repository),
    ``message``, optional ``repo`` and ``branch`` overriding the config.
    Only the given paths are committed (``git commit --only``); other staged
    or modified files are left exactly as they were.
    """

    effect_class = "git_commit"
    authoritative = True
    _fields: ClassVar[set[str]] = {*_GitBase._fields, "allow_empty"}

    def __init__(self, name: str, *, allow_empty: bool = False, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.allow_empty = allow_empty

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> GitCommitConnector:
        fields = cls._config(name, table)
        return cls(name, allow_empty=config_bool(f"connector {name!r}", table, "allow_empty"), **fields)

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        self._checked(payload)

    def _checked(self, payload: Payload) -> tuple[Path, str, str, list[str]]:
        repo = self._repo(payload)
        branch = self._branch(repo, payload)
        message = payload.get("message")
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput(f"connector {self.name!r}: payload needs a 'message'")
        if _OWN_TRAILER.search(message):
            # A copied trailer would make this commit claim another step's key too.
            raise InvalidInput(
                f"connector {self.name!r}: the message has its own '{TRAILER}:' line; "
                "remove it, the connector adds the step's key itself"
            )
        paths = _paths(payload.get("paths"))
        self._check_paths(repo, paths)
        return repo, branch, message, paths

    def execute(self, step_key: str, payload: Payload) -> str:
        repo, branch, message, paths = self._checked(payload)
        current = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).out.strip()
        if current != branch:
            # Switching branches under someone's work tree is not ours to do.
            raise EffectFailed(
                f"{repo} is on branch {current or '(detached)'!r}, not {branch!r}; "
                "check out the branch first. Nothing was committed"
            )
        # A commit already carrying this key is this effect: never make a second.
        existing = _commits_with_key(repo, branch, step_key)
        if existing:
            return existing[0]
        added = _git(repo, "add", "--all", "--", *paths, check=False)
        if added.code != 0:
            raise EffectFailed(f"git add in {repo} failed: {_first_line(added.err)}")
        args = ["commit", "--quiet", "--no-edit", "-m", message, f"--trailer={TRAILER}: {step_key}"]
        if self.allow_empty:
            args.append("--allow-empty")
        committed = _git(repo, *args, "--only", "--", *paths, check=False)
        if committed.code != 0:
            text = committed.out + committed.err
            if "nothing to commit" in text or "no changes added" in text:
                raise EffectFailed(
                    f"nothing to commit in {repo}: {', '.join(paths)} match the branch already"
                )
            # A commit that fails (hook refused, identity missing) leaves no commit.
            raise EffectFailed(f"git commit in {repo} failed: {_first_line(committed.err or text)}")
        return _git(repo, "rev-parse", "HEAD").out.strip()

    def _check_paths(self, repo: Path, paths: list[str]) -> None:
        for p in paths:
            full = (repo / p).resolve()
            if not full.is_relative_to(repo.resolve()) or full == repo.resolve():
                raise InvalidInput(f"path {p!r} is not a file inside the repository {repo}")

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Search the branch, then the remote-tracking branch after a fetch, for the trailer."""
        repo = self._repo(payload)
        branch = self._branch(repo, payload)
        local = _commits_with_key(repo, branch, step_key)
        if local:
            return Found(local[0], {"ref": branch, "count": len(local)})
        remote = self._remote(repo)
        if remote is None:
            return ABSENT
        error = self._fetch(repo, remote, branch)
        if error:
            return Ambiguous(
                f"no commit with '{TRAILER}: {step_key}' on {branch} in {repo}, and fetching "
                f"{remote} failed ({error}); check {remote}/{branch} for that trailer"
            )
        ref = f"refs/remotes/{remote}/{branch}"
        on_remote = _commits_with_key(repo, ref, step_key)
        if on_remote:
            return Found(on_remote[0], {"ref": f"{remote}/{branch}", "count": len(on_remote)})
        return ABSENT

    def verify(self, step_key: str, evidence: str) -> bool:
        """The recorded SHA is still on the configured branch and carries the key."""
        repo = self._repo({})
        branch = self._branch(repo, {})
        return evidence in _commits_with_key(repo, branch, step_key)

    def count(self, step_key: str) -> int:
        """Commits on the configured branch carrying this key."""
        repo = self._repo({})
        return len(_commits_with_key(repo, self._branch(repo, {}), step_key))


class GitPushConnector(_GitBase):
    """Pushes a commit to a remote branch; evidence ``<remote>/<branch>@<sha>``.

    Payload (all optional): ``sha`` (the commit to push), or ``commit_key``
    (the step key of the commit step, found by its trailer), else the local
    branch head; ``repo`` and ``branch`` override the config. The push is
    never forced: a remote that moved on is a definite failure.
    """

    effect_class = "publish"
    authoritative = True

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> GitPushConnector:
        return cls(name, **cls._config(name, table))

    def _target(self, payload: Payload) -> tuple[Path, str, str, str]:
        repo = self._repo(payload)
        branch = self._branch(repo, payload)
        remote = self._remote(repo)
        if remote is None:
            raise InvalidInput(f"{repo} has no remote 'origin'; set 'remote'")
        sha = payload.get("sha")
        commit_key = payload.get("commit_key")
        if sha:
            res = _git(repo, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}", check=False)
            if res.code != 0:
                raise InvalidInput(f"{repo} has no commit {sha!r}")
            sha = res.out.strip()
        elif commit_key:
            found = _commits_with_key(repo, branch, str(commit_key))
            if not found:
                raise InvalidInput(f"no commit with '{TRAILER}: {commit_key}' on {branch} in {repo}")
            sha = found[0]
        else:
            if not _has_commit(repo, branch):
                raise InvalidInput(f"{repo} has no branch {branch!r} with commits to push")
            sha = _git(repo, "rev-parse", branch).out.strip()
        return repo, remote, branch, str(sha)

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        repo = self._repo(payload)
        self._branch(repo, payload)
        if self._remote(repo) is None:
            raise InvalidInput(f"{repo} has no remote 'origin'; set 'remote'")

    def execute(self, step_key: str, payload: Payload) -> str:
        repo, remote, branch, sha = self._target(payload)
        res = _git(repo, "push", "--porcelain", remote, f"{sha}:refs/heads/{branch}", check=False)
        evidence = Evidence(f"{remote}/{branch}@{sha}", remote=remote, branch=branch, sha=sha)
        if res.code == 0:
            return evidence
        text = (res.out + res.err).lower()
        if "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text:
            raise EffectFailed(
                f"push of {sha[:12]} to {remote}/{branch} was rejected (the remote branch has "
                "commits this one does not contain); integrate them, then push again"
            )
        if "[remote rejected]" in text:
            raise EffectFailed(f"{remote} refused the push to {branch}: {_first_line(res.out)}")
        if any(phrase in text for phrase in _UNREACHABLE):
            raise EffectFailed(f"cannot reach {remote} from {repo}: {_first_line(res.err)}")
        # Anything else (connection cut mid-push) may have updated the remote.
        raise ConnectorError(f"push to {remote}/{branch} ended unclearly: {_first_line(res.err)}")

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        """Fetch, then ask whether the remote branch contains the commit."""
        repo, remote, branch, sha = self._target(payload)
        error = self._fetch(repo, remote, branch)
        if error:
            return Ambiguous(
                f"cannot fetch {remote} ({error}); check whether {remote}/{branch} contains commit {sha}"
            )
        ref = f"refs/remotes/{remote}/{branch}"
        if not _has_commit(repo, ref):
            return ABSENT
        contained = _git(repo, "merge-base", "--is-ancestor", sha, ref, check=False)
        if contained.code == 0:
            return Found(Evidence(f"{remote}/{branch}@{sha}", remote=remote, branch=branch, sha=sha),
                         {"remote_ref": ref})
        if contained.code == 1:
            return ABSENT
        raise ConnectorError(f"git merge-base in {repo} failed: {_first_line(contained.err)}")

    def verify(self, step_key: str, evidence: str) -> bool:
        """The remote branch still contains the recorded commit."""
        sha = evidence.rpartition("@")[2]
        return isinstance(self.lookup(step_key, {"sha": sha}), Found)

    def count(self, step_key: str) -> int:
        return 1 if isinstance(self.lookup(step_key, {}), Found) else 0
