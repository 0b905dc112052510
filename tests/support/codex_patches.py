"""Codex `apply_patch` forms, each with the files it touches: read by the hook's parser
(tests/unit/integrations/test_codex_patch.py) and applied by the real Codex 0.171.0 binary
(tests/e2e/test_codex_patch.py). The grammar cases of openai/codex
`codex-rs/apply-patch/src/parser.rs` tests are here, rewritten to paths this table seeds.

Every case runs in a directory seeded with SEED. `touched` maps each path (as the patch
names it) to True when the patch removes it; None means oms refuses the patch: `codex`
"rejects" when Codex refuses it too, "applies" when oms is the stricter of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SEED = {"s.txt": "def f():\n    pass\nold\n", "d.txt": "gone\n"}


@dataclass(frozen=True)
class PatchCase:
    name: str
    patch: str
    touched: dict[str, bool] | None
    codex: Literal["applies", "rejects"] = "applies"


def _p(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch"))


UPDATE_S = ("*** Update File: s.txt", "@@", "-old", "+new")

CASES = (
    # openai/codex parser tests
    PatchCase("codex_all_three_kinds_and_a_move", _p(
        "*** Add File: path/add.py", "+abc", "+def", "*** Delete File: d.txt",
        "*** Update File: s.txt", "*** Move to: path/update2.py", "@@ def f():",
        "-    pass", "+    return 123"),
        {"path/add.py": False, "d.txt": True, "s.txt": True, "path/update2.py": False}),
    PatchCase("codex_update_then_add", _p(
        "*** Update File: s.txt", "@@", "+line", "*** Add File: other.py", "+content"),
        {"s.txt": False, "other.py": False}),
    PatchCase("codex_first_chunk_without_at_at", _p("*** Update File: s.txt", " old", "+bar"),
              {"s.txt": False}),
    PatchCase("codex_padded_markers",
              "*** Begin Patch \n*** Add File: foo\n+hi\n *** End Patch", {"foo": False}),
    PatchCase("codex_no_hunks", _p(), {}),
    PatchCase("codex_empty_update", _p("*** Update File: s.txt"), None, "rejects"),
    PatchCase("codex_not_a_patch", "bad", None, "rejects"),
    PatchCase("codex_no_end", "*** Begin Patch\nbad", None, "rejects"),
    # whitespace around headers: trimmed (Unicode White_Space), as Codex trims them
    PatchCase("leading_space_add_header", _p(" *** Add File: .git/hooks/pre-commit", "+#!/bin/sh"),
              {".git/hooks/pre-commit": False}),
    PatchCase("tab_before_update_header", _p("\t" + UPDATE_S[0], *UPDATE_S[1:]),
              {"s.txt": False}),
    PatchCase("ideographic_space_before_delete", _p("\u3000*** Delete File: d.txt"),
              {"d.txt": True}),
    PatchCase("trailing_whitespace_on_header", _p("*** Add File: AGENTS.md \t", "+obey"),
              {"AGENTS.md": False}),
    PatchCase("space_after_the_marker_is_the_name", _p("*** Add File:  AGENTS.md", "+x"),
              {" AGENTS.md": False}),
    PatchCase("unit_separator_is_not_whitespace", _p("\x1f*** Add File: q", "+x"), None,
              "rejects"),
    PatchCase("no_space_after_colon", _p("*** Add File:x", "+x"), None, "rejects"),
    PatchCase("unknown_header", _p("*** Frobnicate File: x"), None, "rejects"),
    # Move to
    PatchCase("move_to_trailing_whitespace", _p(
        UPDATE_S[0], "*** Move to: .github/workflows/ci.yml \t", *UPDATE_S[1:]),
        {"s.txt": True, ".github/workflows/ci.yml": False}),
    PatchCase("move_to_leading_space_in_name", _p(UPDATE_S[0], "*** Move to:  m.txt",
                                                  *UPDATE_S[1:]),
              {"s.txt": True, " m.txt": False}),
    PatchCase("move_to_after_a_blank_line", _p(UPDATE_S[0], "", "*** Move to: m.txt",
                                               *UPDATE_S[1:]), None, "rejects"),
    PatchCase("move_to_after_a_chunk", _p(*UPDATE_S, "*** Move to: m.txt"), None, "rejects"),
    PatchCase("indented_move_to", _p(UPDATE_S[0], " *** Move to: CLAUDE.md", "-old", "+new"),
              None),
    PatchCase("indented_header_in_a_chunk", _p(*UPDATE_S, " *** Add File: q", "+x"), None),
    # hunk forms
    PatchCase("chunks_with_context_and_end_of_file", _p(
        "*** Update File: s.txt", "@@ def f():", "-    pass", "+    return 1", "",
        "@@", "-old", "+new", "*** End of File \t"), {"s.txt": False}),
    PatchCase("deletion_only_update", _p("*** Update File: s.txt", "@@", "-old"),
              {"s.txt": False}),
    PatchCase("add_with_no_lines", _p("*** Add File: empty.txt"), {"empty.txt": False}),
    PatchCase("dot_dot_in_a_path", _p("*** Add File: sub/../AGENTS.md", "+x"),
              {"sub/../AGENTS.md": False}),
    PatchCase("second_chunk_without_at_at", _p(*UPDATE_S, "x"), None, "rejects"),
    PatchCase("blank_line_after_an_add", _p("*** Add File: q", "+x", ""), None, "rejects"),
    # line endings and wrappers
    PatchCase("crlf", _p("*** Add File: c", "+x", UPDATE_S[0], "*** Move to: .codex/config.toml",
                         *UPDATE_S[1:]).replace("\n", "\r\n") + "\r\n",
              {"c": False, "s.txt": True, ".codex/config.toml": False}),
    PatchCase("heredoc_quoted", "<<'EOF'\n" + _p("*** Add File: h1", "+x") + "\nEOF\n",
              {"h1": False}),
    PatchCase("heredoc_plain", "<<EOF\n" + _p("*** Add File: h2", "+x") + "\nEOF",
              {"h2": False}),
    PatchCase("heredoc_double_quoted", '<<"EOF"\n' + _p("*** Add File: h3", "+x") + "\nEOF",
              {"h3": False}),
    PatchCase("heredoc_opener_with_a_space", "<<'EOF' \n" + _p("*** Add File: h4", "+x")
              + "\nEOF", None, "rejects"),
)  # fmt: skip
