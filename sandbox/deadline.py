"""One wall-clock budget shared by every stage of a gate: the copy, the scanners, the checks."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .errors import SandboxUnavailable


class BudgetExpired(SandboxUnavailable):
    """The gate's time budget ran out before the work was done."""


@dataclass(frozen=True)
class Deadline:
    """A monotonic end time, made once per gate and handed to each stage."""

    ends_at: float
    budget_s: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(ends_at=time.monotonic() + seconds, budget_s=seconds)

    def remaining(self) -> float:
        return self.ends_at - time.monotonic()

    def expired(self, what: str) -> BudgetExpired:
        return BudgetExpired(
            f"the gate's time budget ({self.budget_s:.0f} s) ran out {what}; "
            "raise the time-outs in oms.toml or shrink the candidate"
        )

    def check(self, what: str) -> None:
        """BudgetExpired if no time is left; `what` says where the gate was."""
        if self.remaining() <= 0:
            raise self.expired(what)

    def clamp(self, timeout_s: int, what: str) -> int:
        """`min(timeout_s, remaining)` in whole seconds; BudgetExpired below one second."""
        left = math.floor(self.remaining())
        if left < 1:
            raise self.expired(what)
        return min(timeout_s, left)
