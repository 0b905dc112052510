"""The tool definitions hosts pin: the server lists exactly these tools, with this digest."""

from __future__ import annotations

from pathlib import Path

import anyio

from gatekeeper.mcp.server import tools_digest

# A change to a tool's name, description, schema or annotations changes it: update it on
# purpose only, and say so in docs/mcp.md. It was sha256:b0c3fe50… (the same tools before
# the split into tools/ modules) until every parameter got a description and `context`
# its enum; then sha256:b551afb8… until the run and board tools (issue 17) came and
# oms_status, oms_runs, oms_read_artifact and oms_transfer_preview gained their optional run
# inputs.
PINNED = "sha256:4726c6ded12109a29cf8f4bb9a284bd991061ca4435b32f31cfd5c48179bdeef"
NAMES = [
    "oms_abort", "oms_agent_board", "oms_assign_roles", "oms_capture_evidence", "oms_consult",
    "oms_continue", "oms_doctor", "oms_evidence_audit", "oms_fanout", "oms_git_diff",
    "oms_git_status", "oms_loop", "oms_model_access", "oms_orchestrate", "oms_plan",
    "oms_policy", "oms_pro_access", "oms_process_result", "oms_read_artifact",
    "oms_recommend_loop", "oms_reconcile", "oms_repo_read_file", "oms_repo_search",
    "oms_repo_tree", "oms_roles", "oms_runs", "oms_status", "oms_summon",
    "oms_transfer_preview", "oms_transfer_status",
]  # fmt: skip


def test_tools_list_digest_is_the_pinned_one(git_repo: Path) -> None:
    digest, names = anyio.run(tools_digest, git_repo)
    assert names == NAMES
    assert digest == PINNED
