"""`oms reconcile watchdog`: one recovery-only pass (docs/recovery.md); `oms reconcile work`:
work.db rebuilt from the signed log it projects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.repo.git import open_repo
from gatekeeper.text import sanitize
from gatekeeper.work.fence import Work
from gatekeeper.work.rebuild import rebuild
from gatekeeper.work.watchdog import CATEGORIES, watchdog


@click.group(cls=FullHelpGroup)
def reconcile() -> None:
    """Recovery: a watchdog pass over dead panes, stalled work, expired leases; work.db rebuilt."""


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


@reconcile.command("work")
@REPO_OPTION
@command
def reconcile_work(repo: Path) -> Outcome:
    """Rebuild a lost or damaged work.db from the signed log (run it when no other oms works
    on this repository). The old file is kept beside it, renamed."""
    done = rebuild(open_repo(repo)).to_json()
    line = f"work.db rebuilt from {done['entries']} committed entries: {done['rows']} rows"
    if done["unconfirmed"] is not None:
        line += f"; seq {done['unconfirmed']} left out (no transitions row confirmed it)"
    kept = [f"the old work.db is kept at {done['kept']}"] if done["kept"] else []
    return Outcome({"rebuilt": done}, lines=[sanitize(x) for x in (line, *kept)])


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
