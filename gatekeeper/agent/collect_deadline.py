"""Collect's one deadline: oms' own walk checks it, and every git collect runs is killed at it.

A workspace is hostile ground, so no step of reading it back may wait without an end: a
FIFO, a huge tree or a git that blocks for any other reason must end the run with
`agent.run.end`, not hang it. One `Deadline` is made when collect starts and handed to
each step; a git call gets what is left of it as its timeout.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gatekeeper.errors import Blocked
from sandbox import Deadline

COLLECT_DEADLINE_S = 600.0  # the whole of collect: walk, hash, commit, pack, check, ref


class CollectTimeout(Blocked):
    """Collect ran past its deadline: the git it ran was killed and nothing was collected."""

    @classmethod
    def of(cls, deadline: Deadline, what: str) -> CollectTimeout:
        return cls(f"collecting the workspace took longer than {deadline.budget_s:.0f} s "
                   f"({what}); nothing was collected")  # fmt: skip


def left(deadline: Deadline, what: str) -> float:
    """The seconds left for the next step; CollectTimeout when none are."""
    remaining = deadline.remaining()
    if remaining <= 0:
        raise CollectTimeout.of(deadline, what)
    return remaining


@contextmanager
def killed_at(deadline: Deadline, what: str, *procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Run the body; at the deadline kill `procs` (which ends any wait on them), and then
    CollectTimeout, whatever the body raised because of the kill."""
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        for proc in procs:
            proc.kill()

    timer = threading.Timer(left(deadline, what), kill)
    timer.daemon = True
    timer.start()
    try:
        yield
    except BaseException:
        if not fired.is_set():
            raise
    finally:
        timer.cancel()
    if fired.is_set():
        for proc in procs:
            proc.wait()  # killed: reaped at once
        raise CollectTimeout.of(deadline, what)
