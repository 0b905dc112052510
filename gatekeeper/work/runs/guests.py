"""`summon` and `fanout`: read-only, advisory roles onto an existing run. STUB: the guests
helper fills it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gatekeeper.work.runs.api import Out


def summon(repo_dir: Path, run_id: str, role: str, brief: str, agent: str | None = None,
           kind: str | None = None, persona: str | None = None,
           constraints: Sequence[str] | None = None,
           evidence_refs: Sequence[str] | None = None) -> Out:  # fmt: skip
    raise NotImplementedError


def fanout(repo_dir: Path, run_id: str, items: Sequence[Mapping[str, Any]],
           max_items: int | None = None) -> Out:  # fmt: skip
    raise NotImplementedError
