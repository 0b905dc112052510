"""`oms run capture RUN CHECK` / `oms_capture_evidence`: runtime-captured validation
evidence. STUB: the guests helper fills it."""

from __future__ import annotations

from pathlib import Path

from gatekeeper.work.runs.api import Out


def capture(repo_dir: Path, run_id: str, check: str) -> Out:
    raise NotImplementedError
