"""The machine facts recorded with every benchmark result."""

from __future__ import annotations

import subprocess
from pathlib import Path

from llm_assets.machine import git_commit


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_git_commit_marks_uncommitted_changes(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo) == head
    (repo / "notes.txt").write_text("untracked files do not count\n")
    assert git_commit(repo) == head
    (repo / "code.py").write_text("x = 2\n")
    assert git_commit(repo) == f"{head}-dirty"
    _git(repo, "add", "code.py")  # staged but not committed: still dirty
    assert git_commit(repo) == f"{head}-dirty"
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    assert git_commit(outside) is None
