"""The tool definitions hosts pin: the server lists exactly these tools, with this digest."""

from __future__ import annotations

from pathlib import Path

import anyio

from gatekeeper.mcp.server import tools_digest

# A change to a tool's name, description, schema or annotations changes it: update it on
# purpose only, and say so in docs/mcp.md. It was sha256:b0c3fe50… (the same tools before
# the split into tools/ modules) until every parameter got a description and `context`
# its enum.
PINNED = "sha256:b551afb802923bfc73e33caa8cc734dedeba2d9b331401e6d64166859c4e5de9"
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
