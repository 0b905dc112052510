"""The implement steps: the implementer through the core's ticket, lease, dispatch and
receipt; then `oms verify` (the result gate decides). STUB: the implement helper fills it."""

from __future__ import annotations

from gatekeeper.work.fence import Work
from gatekeeper.work.runs.engine import Progress, step
from gatekeeper.work.runs.model import Run
from gatekeeper.work.runs.store import Runs


@step("implement")
def implement(work: Work, runs: Runs, run: Run) -> Progress:
    raise NotImplementedError


@step("verify")
def verify(work: Work, runs: Runs, run: Run) -> Progress:
    raise NotImplementedError
