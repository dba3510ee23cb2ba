"""Fixtures for the git connectors: real repositories, a bare remote, a committing child."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


def git(repo: Path, *args: str) -> str:
    """Run real git in ``repo`` and return its output (fails the test on error)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.rstrip("\n")


@dataclass
class Repos:
    """A bare remote on disk and a clone of it on branch ``main`` with one commit."""

    remote: Path
    work: Path
    root: Path

    @staticmethod
    def git(repo: Path, *args: str) -> str:
        """Run real git in ``repo`` and return its output (fails the test on error)."""
        return git(repo, *args)

    def clone(self, name: str) -> Path:
        path = self.root / name
        subprocess.run(["git", "clone", "-q", str(self.remote), str(path)], check=True)
        _identity(path)
        return path

    def keyed(self, repo: Path, ref: str, key: str) -> list[str]:
        """SHAs on ``ref`` whose Retrysafe-Key trailer is ``key``, by plain git."""
        out = git(repo, "log", ref, "--format=%H %(trailers:key=Retrysafe-Key,valueonly,separator=)")
        return [line.split()[0] for line in out.splitlines() if line.split()[1:] == [key]]


def _identity(repo: Path) -> None:
    git(repo, "config", "user.name", "Report Bot")
    git(repo, "config", "user.email", "bot@example.org")


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    root = tmp_path / "git"
    root.mkdir()
    remote = root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    work = root / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    _identity(work)
    (work / "README.md").write_text("notes\n")
    git(work, "add", "README.md")
    git(work, "commit", "-q", "-m", "Start")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "-u", "origin", "main")
    return Repos(remote, work, root)
