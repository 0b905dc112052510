"""A bounded retry with backoff, for the one kind of failure that asking again may cure.

Delivery talks to GitHub (its REST API, or `gh`): a 5xx answer or a reset connection is
often gone a second later. `retried` asks again at most `len(delays)` more times, sleeping
`delays[i]` seconds before each; `sleep` is injectable so that tests do not wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """At most `len(delays) + 1` tries; the default waits 1 + 3 s in all."""

    delays: tuple[float, ...] = (1.0, 3.0)
    sleep: Callable[[float], None] = time.sleep


RETRY = Retry()


def retried(retry: Retry | None, fn: Callable[[], T], transient: type[Exception]) -> T:
    """`fn()`, asked again after each `transient` failure while `retry` allows."""
    if retry is None:
        return fn()
    for delay in retry.delays:
        try:
            return fn()
        except transient:
            retry.sleep(delay)
    return fn()
