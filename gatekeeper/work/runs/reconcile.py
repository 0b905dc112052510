"""`reconcile`: a completed run's progress packet, its transfer gate, the planner's
schema-bound answer as a `reconciliation` artifact. STUB: the guests helper fills it."""

from __future__ import annotations

from pathlib import Path

from gatekeeper.work.runs.api import Out


def reconcile(repo_dir: Path, run_id: str, role: str | None = None, approval: str = "none",
              message: str | None = None, *, via: str = "mcp") -> Out:  # fmt: skip
    raise NotImplementedError
