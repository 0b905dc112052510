"""The tool definitions hosts pin: the restructured server lists exactly the old tools."""

from __future__ import annotations

from pathlib import Path

import anyio

from gatekeeper.mcp.server import tools_digest

# `oms mcp tools-digest` before the server was split into tools/ modules. A change to a
# tool's name, description, schema or annotations changes it: update it on purpose only.
PINNED = "sha256:b0c3fe508fc499b3308833d3b42970e8e39d43f5b5c3eb572bd4d23f2761c68e"
NAMES = [
    "oms_doctor", "oms_evidence_audit", "oms_git_diff", "oms_git_status", "oms_model_access",
    "oms_policy", "oms_process_result", "oms_read_artifact", "oms_repo_read_file",
    "oms_repo_search", "oms_repo_tree", "oms_runs", "oms_status", "oms_transfer_preview",
    "oms_transfer_status",
]  # fmt: skip


def test_tools_list_digest_is_the_pinned_one(git_repo: Path) -> None:
    digest, names = anyio.run(tools_digest, git_repo)
    assert names == NAMES
    assert digest == PINNED
