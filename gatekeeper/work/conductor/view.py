"""What `oms hud` shows: one read-only snapshot of canonical state.

Goals, tickets, workers, the latest conductor session, pending notification batches, the
number of events, deliveries, the gates' own state (last verdicts, pending transfers,
evidence health: `gatekeeper.gates.status`), and the next actions those imply — read from
`work.db` in one read, never written. Nothing here grants or carries authority: a next action is a
hint naming the oms command a human (or the conductor, through its typed tools) would
use. Text fields are data: bounded here, sanitised where they are drawn.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.gates.status import repo_status
from gatekeeper.work.conductor import sessions
from gatekeeper.work.fence import Work

MAX_ROWS = 200  # per table: a HUD is a glance, `oms goal status` has the rest
MAX_TEXT = 200


def _text(value: Any) -> Any:
    return value[:MAX_TEXT] if isinstance(value, str) else value


def _rows(work: Work, sql: str, *args: object) -> list[dict[str, Any]]:
    return [{k: _text(r[k]) for k in r.keys()} for r in work.db.read(sql, *args)]


def snapshot(work: Work) -> dict[str, Any]:
    """The HUD's one frame of data; the database and the evidence log are only read."""
    goals = _rows(work, "SELECT id, state, objective, horizon, created FROM goals "
                        "ORDER BY created DESC, id LIMIT ?", MAX_ROWS)  # fmt: skip
    tickets = _rows(work, "SELECT id, goal, state, activity, health, title, attempts, "
                          "human_hold, reason, updated FROM tickets "
                          "ORDER BY updated DESC, id LIMIT ?", MAX_ROWS)  # fmt: skip
    workers = _rows(work, "SELECT id, ticket, dispatch, team, state, session, pane, reason, "
                          "updated FROM workers WHERE state NOT IN ('stopped', 'exited') "
                          "ORDER BY updated DESC, id LIMIT ?", MAX_ROWS)  # fmt: skip
    deliveries = _rows(work, "SELECT ticket, state, commit_sha, branch, pr_number, pr_url, "
                             "reason FROM deliveries ORDER BY updated DESC LIMIT ?",
                       MAX_ROWS)  # fmt: skip
    # The count in SQL: the JSON list itself is never cut to MAX_TEXT and then parsed.
    batches = _rows(work, "SELECT id, json_array_length(events) AS events, created FROM batches "
                          "WHERE state = 'pending' ORDER BY created, id LIMIT ?",
                    MAX_ROWS)  # fmt: skip
    [(events,)] = work.db.read("SELECT COUNT(*) FROM events")
    [(pending,)] = work.db.read("SELECT COUNT(*) FROM batches WHERE state = 'pending'")
    [(outbox,)] = work.db.read("SELECT COUNT(*) FROM outbox WHERE state = 'pending'")
    conductor = sessions.latest(work)
    counts: dict[str, int] = {}
    for r in work.db.read("SELECT state, COUNT(*) AS n FROM tickets GROUP BY state"):
        counts[r["state"]] = r["n"]
    data = {
        "goals": goals,
        "tickets": tickets,
        "ticket_counts": counts,
        "workers": workers,
        "conductor": conductor.to_json() if conductor is not None else None,
        "batches": {"pending": pending, "shown": batches},
        "events": {"count": events},
        "outbox": {"pending": outbox},
        "deliveries": deliveries,
        # What the gates see (bare `oms` shows the same): verdicts, transfers, health.
        "gates": repo_status(work.repo).to_json(),
        "conductor_role": work.loaded.policy.conductor.role in work.loaded.policy.roles,
        "delivery_remote": work.loaded.policy.conductor.remote is not None,
    }
    data["next"] = next_actions(data)
    return data


def next_actions(data: dict[str, Any]) -> list[dict[str, str]]:
    """Hints from the state: what is waiting, and the command that serves it."""
    out: list[dict[str, str]] = []
    delivered = {d["ticket"]: d["state"] for d in data["deliveries"]}
    c = data["conductor"]
    if c is None and data.get("conductor_role"):
        out.append({"what": "no conductor session", "command": "oms conductor start"})
    elif c is None:  # no conductor to start: the gates' own next steps
        out += [{"what": n["why"], "command": n["command"]}
                for n in data["gates"]["next_steps"]]  # fmt: skip
    elif c["state"] in ("dead", "stalled", "blocked"):
        out.append({"what": f"conductor {c['id']} is {c['state']}",
                    "command": "oms reconcile watchdog"})  # fmt: skip
    if data["batches"]["pending"]:
        waiting = data["batches"]["pending"]
        out.append(
            {
                "what": f"{waiting} notification batch(es) pending",
                "command": "the conductor re-reads state (oms conductor wait-event)",
            }
        )
    for t in data["tickets"]:
        tid, state = t["id"], t["state"]
        if state == "completed" and t["human_hold"]:
            d = delivered.get(tid)
            if d == "confirmed":
                out.append({"what": f"{tid}: draft PR ready for human review",
                            "command": "review and merge it yourself"})  # fmt: skip
            elif data.get("delivery_remote"):  # delivery is configured: it resumes
                out.append({"what": f"{tid}: READY_FOR_HUMAN, "
                                    f"{'delivery ' + d if d else 'not delivered'}",
                            "command": f"oms ticket deliver {tid}"})  # fmt: skip
            else:
                out.append({"what": f"{tid}: READY_FOR_HUMAN, no [conductor] remote",
                            "command": "review the commit yourself"})  # fmt: skip
        elif state == "verifying":
            out.append({"what": f"{tid}: receipt filed", "command": f"oms verify {tid}"})
        elif state in ("pending", "retryable") and t.get("health") == "parked":
            # Parked for budget, a refused key or a quota: not dispatched until a human acts
            # on the reason and resumes it (a quota's reset resumes it by itself).
            why = t["reason"] or "no reason recorded"
            out.append({"what": f"{tid}: {state}, parked ({why})",
                        "command": f"oms ticket resume {tid}"})  # fmt: skip
        elif state in ("pending", "retryable"):
            out.append({"what": f"{tid}: {state}", "command": "prepare_dispatch (conductor)"})
        elif state in ("blocked", "parked"):
            out.append({"what": f"{tid}: {state} ({t['reason'] or 'no reason recorded'})",
                        "command": "a human looks at it"})  # fmt: skip
    return out[:MAX_ROWS]
