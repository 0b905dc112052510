"""open_repo refuses an unsafe repository on every open, not only the first one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.errors import UsageError
from gatekeeper.repo.git import open_repo


def test_a_repository_made_shallow_after_a_cached_open_is_refused(
    git_repo: Path, oms_env: dict[str, str]
) -> None:
    open_repo(git_repo)  # cached from here on
    (git_repo / ".git" / "shallow").write_text("0" * 40 + "\n")
    with pytest.raises(UsageError, match="shallow"):
        open_repo(git_repo)


def test_a_repository_moved_to_reftable_after_a_cached_open_is_refused(
    git_repo: Path, oms_env: dict[str, str]
) -> None:
    open_repo(git_repo)
    (git_repo / ".git" / "reftable").mkdir()
    with pytest.raises(UsageError, match="reftable"):
        open_repo(git_repo)
