"""Transfer times: UTC, to the second, in one text form (`2026-12-01T12:00:00Z`).

Callers use `clock.now()` (not `from clock import now`) so that one patch moves every
reader of the clock at once (the expiry tests).
"""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"
PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"


def now() -> datetime:
    return datetime.now(UTC)


def stamp(t: datetime) -> str:
    return t.strftime(FORMAT)


def parse_stamp(s: str) -> datetime:
    return datetime.strptime(s, FORMAT).replace(tzinfo=UTC)
