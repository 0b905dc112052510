"""`oms hud`: a read-only view of verdicts, transfers, goals, tickets, workers and next actions.

One frame from canonical state (`gatekeeper.work.conductor.view.snapshot`); on a terminal
without `--once` it is redrawn every 2 s until Ctrl-C. It never writes and carries no
authority; every string drawn is sanitised and never parsed as markup.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, View, command
from gatekeeper.text import sanitize

REFRESH_S = 2.0


@click.command("hud")
@REPO_OPTION
@click.option("--once", is_flag=True, help="Draw one frame and exit (also when not a terminal).")
@command
def hud(repo: Path, once: bool) -> Outcome:
    """A read-only view of verdicts, transfers, goals, tickets, workers and next actions."""
    from gatekeeper.work.api import opened
    from gatekeeper.work.conductor.view import snapshot

    as_json = bool(click.get_current_context().params.get("as_json"))
    with opened(repo) as work:
        data = snapshot(work)
        if as_json or once or not sys.stdout.isatty():
            view = View.detect()
            return Outcome(data, lines=draw(data, view) if view.rich else hud_lines(data))
        live(lambda: snapshot(work))
    return Outcome(data, lines=[])


def live(read: Any) -> None:
    """Redraw every REFRESH_S seconds until Ctrl-C."""
    from rich.console import Console, Group
    from rich.live import Live

    console = Console(markup=False, emoji=False, highlight=False)
    try:
        with Live(Group(*tables(read())), console=console, auto_refresh=False,
                  screen=False) as shown:  # fmt: skip
            while True:
                time.sleep(REFRESH_S)
                shown.update(Group(*tables(read())), refresh=True)
    except KeyboardInterrupt:
        return


def _s(value: object, limit: int = 80) -> str:
    return sanitize("" if value is None else str(value), limit)


def gate_lines(gates: Data) -> list[str]:
    """The gates' part: evidence health, the last verdicts, the pending transfers."""
    lines = [f"evidence: {_s(gates['evidence'], 160)}"]
    lines += [f"verdict #{v['seq']} {_s(v['decision'])} {_s(v['commit'])} {_s(v['time'])}"
              for v in gates["verdicts"]] or ["verdicts: none yet"]  # fmt: skip
    lines += [f"transfer {_s(t['status'])} {_s(t['digest'])} to {_s(t['destination'])}"
              for t in gates["pending_transfers"]] or ["pending transfers: none"]  # fmt: skip
    return lines


def hud_lines(data: Data) -> list[str]:
    """The frame as plain lines (not a terminal)."""
    c = data["conductor"]
    counts = ", ".join(f"{n} {_s(s)}" for s, n in sorted(data["ticket_counts"].items()))
    lines = [f"conductor: {_s(c['id'])} {_s(c['state'])}" if c else "conductor: none",
             f"goals: {len(data['goals'])}; tickets: {counts or 'none'}",
             f"events: {data['events']['count']}; pending batches: "
             f"{data['batches']['pending']}; "
             f"outbox pending: {data['outbox']['pending']}"]  # fmt: skip
    lines += gate_lines(data["gates"])
    for t in data["tickets"]:
        hold = " (human hold)" if t["human_hold"] else ""
        lines.append(f"ticket {_s(t['id'])} {_s(t['state'])}{hold}: {_s(t['title'])}")
    for w in data["workers"]:
        lines.append(f"worker {_s(w['id'])} {_s(w['state'])} ticket {_s(w['ticket'])}")
    for d in data["deliveries"]:
        lines.append(f"delivery {_s(d['ticket'])} {_s(d['state'])} PR {_s(d['pr_number'])}")
    lines += [f"next: {_s(n['what'], 160)} -> {_s(n['command'], 120)}" for n in data["next"]]
    return lines


def tables(data: Data) -> list[Any]:
    """The frame as rich tables (a terminal)."""
    from gatekeeper.cli.tables import _table, cell

    head = [*hud_lines(data)[:3], gate_lines(data["gates"])[0]]
    out: list[Any] = [cell(line) for line in head]

    def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        if rows:
            t = _table(title, *columns)
            for r in rows:
                t.add_row(*(cell(_s(v)) for v in r))
            out.append(t)

    gates = data["gates"]
    table("verdicts", ("seq", "decision", "commit", "time"),
          [(v["seq"], v["decision"], v["commit"], v["time"])
           for v in gates["verdicts"]])  # fmt: skip
    table("pending transfers", ("status", "digest", "destination", "bytes"),
          [(t["status"], t["digest"], t["destination"], t["bytes"])
           for t in gates["pending_transfers"]])  # fmt: skip
    table("goals", ("goal", "state", "objective"),
          [(g["id"], g["state"], g["objective"]) for g in data["goals"]])  # fmt: skip
    table("tickets", ("ticket", "state", "activity", "health", "title"),
          [(t["id"], t["state"], t["activity"], t["health"], t["title"])
           for t in data["tickets"]])  # fmt: skip
    table("workers", ("worker", "state", "ticket", "pane"),
          [(w["id"], w["state"], w["ticket"], w["pane"]) for w in data["workers"]])  # fmt: skip
    table("deliveries", ("ticket", "state", "PR", "commit"),
          [(d["ticket"], d["state"], d["pr_number"], str(d["commit_sha"])[:12])
           for d in data["deliveries"]])  # fmt: skip
    table("next", ("what", "command"), [(n["what"], n["command"]) for n in data["next"]])
    return out


def draw(data: Data, view: View) -> list[str]:
    from gatekeeper.cli.tables import draw as draw_tables

    return draw_tables(tables(data), view)
