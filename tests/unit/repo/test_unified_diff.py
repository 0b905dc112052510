"""oms' own unified diff of a worktree file is git-shaped. (That git sees the same
change: tests/e2e/test_worktree.py.)"""

from __future__ import annotations

from gatekeeper.repo.worktree import unified_diff


def test_unified_diff_is_git_shaped_and_marks_a_missing_final_newline() -> None:
    d = unified_diff("a.txt", b"one\ntwo\n", b"one\nthree").decode()
    assert d.startswith("diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@")
    assert "-two\n+three\n\\ No newline at end of file\n" in d
    created = unified_diff("n.txt", None, b"x\n").decode()
    assert "new file mode" in created and "--- /dev/null\n+++ b/n.txt\n" in created
    assert unified_diff("same", b"x\n", b"x\n") == b""
