"""`oms reconcile watchdog`: one recovery-only pass (docs/recovery.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command
from gatekeeper.text import sanitize
from gatekeeper.work.fence import Work
from gatekeeper.work.watchdog import CATEGORIES, watchdog


@click.group()
def reconcile() -> None:
    """Recovery: one watchdog pass over dead panes, stalled work and expired leases."""


@reconcile.command("watchdog")
@REPO_OPTION
@command
def reconcile_watchdog(repo: Path) -> Outcome:
    """One pass: mark dead workers and waiters, stalled sessions and expired leases whose
    holder is dead; respawn a dead conductor once (or mark it stalled); make quota lanes
    past their reset resumable; report stale outbox rows. Never starts a worker or repeats
    work."""
    work = Work.open(repo)
    try:
        data = watchdog(work)
    finally:
        work.close()
    return Outcome({"watchdog": data}, lines=_lines(data))


def _lines(data: dict[str, Any]) -> list[str]:
    seq = data["evidence_seq"]
    out = [f"watchdog: {data['changed']} changed" + (f" (evidence seq {seq})" if seq else "")]
    for category in CATEGORIES:
        for item in data[category]:
            name = (
                item.get("id")
                or item.get("dispatch")
                or item.get("worker")
                or item.get("ticket")
                or item.get("generation")
            )
            why = f": {item['reason']}" if item.get("reason") else ""
            out.append(sanitize(f"  {category} {name}: {item['did']}{why}"))
    return out
