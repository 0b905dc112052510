"""The hook reads Codex's apply_patch as Codex 0.171.0 does (gatekeeper/integrations/hooks/
patch.py): every patch form of tests/support/codex_patches.py touches the files the real
binary touches (tests/e2e/test_codex_patch.py), the heredoc forms of a shell command too,
and `oms hook codex PreToolUse` denies each form that reaches a protected path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.codex_patches import CASES, PatchCase

from gatekeeper.integrations.hooks import run_hook
from gatekeeper.integrations.hooks.patch import PatchError, parse_patch, shell_patches
from gatekeeper.integrations.hooks.writes import codex_writes, patch_writes

PROTECTED = (".git/", ".github/", ".codex/", "AGENTS.md", "CLAUDE.md")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_patch_touches_what_codex_touches(case: PatchCase) -> None:
    if case.touched is None:
        with pytest.raises(PatchError):
            patch_writes(case.patch)
    else:
        assert {w.path: w.deleted for w in patch_writes(case.patch)} == case.touched


def test_added_lines_are_numbered_by_their_line_in_the_text_given() -> None:
    patch = ("\r\n\n *** Begin Patch\r\n*** Add File: a\r\n+one\r\n*** Update File: b\r\n"
             "*** Move to: c\r\n@@ ctx\r\n-x\r\n+two\r\n*** End Patch\r\n")  # fmt: skip
    got = {w.path: w.lines for w in patch_writes(patch)}
    assert got == {"a": ((5, "one"),), "b": (), "c": ((10, "two"),)}


def test_a_heredoc_wrapped_patch_numbers_lines_past_the_opener() -> None:
    hunks = parse_patch("<<'EOF'\n*** Begin Patch\n*** Add File: a\n+k\n*** End Patch\nEOF")
    assert [h.added for h in hunks] == [((4, "k"),)]


# -- a patch in a shell command --------------------------------------------------------------

BODY = "*** Begin Patch\n*** Add File: workflows/ci.yml\n+on: push\n*** End Patch"


@pytest.mark.parametrize(
    ("command", "paths"),
    [
        (f"apply_patch <<'EOF'\n{BODY}\nEOF", ["workflows/ci.yml"]),
        (f"applypatch <<EOF\n{BODY}\nEOF\n", ["workflows/ci.yml"]),
        (f"cd .github && apply_patch <<'EOF'\n{BODY}\nEOF", [".github/workflows/ci.yml"]),
        (f'cd ".github" &&\napply_patch <<"PATCH"\n{BODY}\nPATCH', [".github/workflows/ci.yml"]),
        (f"  cd '.github' && applypatch << 'X'\n{BODY}\nX", [".github/workflows/ci.yml"]),
        (f"cd /abs && apply_patch <<EOF\n{BODY}\nEOF", ["/abs/workflows/ci.yml"]),
        (f"apply_patch <<-EOF\n{BODY}\n\t\tEOF", ["workflows/ci.yml"]),
        (f"apply_patch <<EOF\n{BODY}", ["workflows/ci.yml"]),  # no closing line: the rest
        (
            f"apply_patch <<'EOF'\n{BODY.replace(chr(10), chr(13) + chr(10))}\nEOF",
            ["workflows/ci.yml"],
        ),
        (f"cat > notes.md <<'EOF'\n{BODY}\nEOF", []),  # names no apply_patch
        (f"apply_patch <<< '{BODY}'", []),  # a here-string is no heredoc
        ("apply_patch <<EOF\nhello\nEOF", []),  # a body without a patch
    ],
)
def test_a_shell_heredoc_is_read_where_codex_would_apply_it(command: str, paths: list[str]) -> None:
    writes = codex_writes("Bash", {"command": command})
    assert [w.path for w in writes] == paths


def test_a_heredoc_body_names_its_lines_in_the_command() -> None:
    (found,) = shell_patches(f"cd x && apply_patch <<'EOF'\n{BODY}\nEOF")
    assert (found.first_line, found.workdir) == (2, "x")
    assert codex_writes("Bash", {"command": f"apply_patch <<E\n{BODY}\nE"})[0].lines == (
        (4, "on: push"),
    )


def test_a_heredoc_patch_codex_would_refuse_is_refused() -> None:
    with pytest.raises(PatchError):
        codex_writes("Bash", {"command": "apply_patch <<EOF\n*** Begin Patch\nbad\nEOF"})


@pytest.mark.parametrize(
    "command",
    [["apply_patch", BODY], ["applypatch", BODY], ["bash", "-lc", f"apply_patch <<E\n{BODY}\nE"]],
)
def test_an_argv_command_is_read_as_codex_runs_it(command: list[str]) -> None:
    assert [w.path for w in codex_writes("Bash", {"command": command})] == ["workflows/ci.yml"]


# -- the hook ------------------------------------------------------------------------------


def _pre_tool_use(repo: Path, tool: str, command: Any) -> dict[str, Any]:
    body = {"cwd": str(repo), "tool_name": tool, "tool_input": {"command": command}}
    answer = run_hook("codex", "PreToolUse", json.dumps(body).encode(), in_sandbox=True)
    assert answer.exit_code == 0 and answer.stderr == ""
    return json.loads(answer.stdout)["hookSpecificOutput"] if answer.stdout else {}


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    (tmp_path / "r" / ".git").mkdir(parents=True)
    return tmp_path / "r"


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.touched and any(p.strip().startswith(PROTECTED) for p in c.touched)
     and not any(p.startswith(" ") for p in c.touched)],  # " AGENTS.md" is another file
    ids=lambda c: c.name,
)  # fmt: skip
def test_every_form_reaching_a_protected_path_is_denied(case: PatchCase, repo_dir: Path) -> None:
    out = _pre_tool_use(repo_dir, "apply_patch", case.patch)
    assert out.get("permissionDecision") == "deny", (case.name, out)
    assert "protected path" in out["permissionDecisionReason"]


def test_the_repro_a_leading_space_before_add_file_is_denied(repo_dir: Path) -> None:
    patch = "*** Begin Patch\n *** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n*** End Patch"
    reason = _pre_tool_use(repo_dir, "apply_patch", patch)["permissionDecisionReason"]
    assert ".git/hooks/pre-commit" in reason


def test_a_cd_before_a_heredoc_moves_the_judged_path(repo_dir: Path) -> None:
    command = f"cd .github && apply_patch <<'EOF'\n{BODY}\nEOF"
    reason = _pre_tool_use(repo_dir, "Bash", command)["permissionDecisionReason"]
    assert ".github/workflows/ci.yml is a protected path" in reason


@pytest.mark.parametrize("case", [c for c in CASES if c.touched is None], ids=lambda c: c.name)
def test_a_patch_oms_cannot_read_as_codex_does_is_denied(case: PatchCase, repo_dir: Path) -> None:
    out = _pre_tool_use(repo_dir, "apply_patch", case.patch)
    assert out["permissionDecision"] == "deny" and "patch" in out["permissionDecisionReason"]


def test_an_unprotected_patch_is_allowed(repo_dir: Path) -> None:
    assert _pre_tool_use(repo_dir, "apply_patch", "*** Begin Patch\n*** Add File: x.md\n+hi\n"
                         "*** End Patch") == {}  # fmt: skip
