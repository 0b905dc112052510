"""oms_roles, oms_assign_roles, oms_agent_board, oms_recommend_loop, oms_pro_access:
display and configuration, no authority. STUB: the board helper fills it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gatekeeper.work.runs.api import Out


def roles_view(repo_dir: Path) -> Out:
    raise NotImplementedError


def assign_roles(repo_dir: Path, role_mapping: Mapping[str, str]) -> Out:
    raise NotImplementedError


def agent_board(repo_dir: Path, run_id: str | None = None, include_artifact: bool = False) -> Out:
    raise NotImplementedError


def recommend_loop(repo_dir: Path, goal: str, constraints: Sequence[str] | None = None,
                   acceptance_criteria: Sequence[str] | None = None,
                   validation_commands: Sequence[str] | None = None,
                   allowed_paths: Sequence[str] | None = None,
                   forbidden_changes: Sequence[str] | None = None,
                   max_iterations: int | None = None) -> Out:  # fmt: skip
    raise NotImplementedError


def pro_access(repo_dir: Path, goal: str | None = None,
               constraints: Sequence[str] | None = None) -> Out:  # fmt: skip
    raise NotImplementedError
