"""The tool definitions hosts pin: per profile, the server lists exactly these tools, with
this digest."""

from __future__ import annotations

from pathlib import Path

import anyio

from gatekeeper.mcp.server import tools_digest

# A change to a tool's name, description, schema or annotations changes it: update it on
# purpose only, and say so in docs/mcp.md. It was sha256:b0c3fe50… (the same tools before
# the split into tools/ modules) until every parameter got a description and `context`
# its enum; then sha256:b551afb8… until the run and board tools (issue 17) came and
# oms_status, oms_runs, oms_read_artifact and oms_transfer_preview gained their optional run
# inputs. It is the digest of the `all` profile; the default (gatekeeper) profile has its own.
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


GATEKEEPER_PINNED = "sha256:409245d84f16bcd634854d281a46a284815b874e1006be6fff901b8853de9c18"
GATEKEEPER_NAMES = [
    "oms_doctor", "oms_evidence_audit", "oms_git_diff", "oms_git_status", "oms_policy",
    "oms_process_result", "oms_repo_read_file", "oms_repo_search", "oms_repo_tree",
    "oms_transfer_preview", "oms_transfer_status",
]  # fmt: skip


def test_tools_list_digest_of_every_tool_is_the_pinned_one(git_repo: Path) -> None:
    digest, names = anyio.run(tools_digest, git_repo, "all")
    assert names == NAMES
    assert digest == PINNED


def test_the_default_profile_is_the_gatekeepers_with_its_own_pin(git_repo: Path) -> None:
    # git_repo's default branch has no policy: the built-in defaults, no `[mcp] tools`.
    for asked in (None, "gatekeeper"):
        digest, names = anyio.run(tools_digest, git_repo, asked)
        assert names == GATEKEEPER_NAMES
        assert digest == GATEKEEPER_PINNED
