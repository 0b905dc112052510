"""`oms run plan|orchestrate|consult|summon|fanout|continue|loop|reconcile|abort|status|list|
artifact|capture`: each renders ONE function of `gatekeeper.work.runs`, as `oms_*` does.

The functions decide, validate and record; this module only parses options, reads the
fan-out items file (a bounded regular file: items are data, never argv) and draws a few
lines. Every piece of text a run carries (goals, provider summaries, reasons, artifact
text) may come from a model or an agent, so all of it goes through `sanitize` here.

`continue --approve` is the one way a human says yes from the CLI: it asks at the
controlling terminal (`via="terminal"`) and is refused (exit 3) without one; reject,
revise and none need no terminal (`via="cli"`).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import UsageError
from gatekeeper.text import sanitize

MAX_ITEMS_FILE_BYTES = 256 * 1024  # a fan-out of at most 8 briefs fits many times over
SUMMARY_CHARS = 200
SHOWN_ACTIONS = 6
SHOWN_EVENTS = 8

CYCLES_OPTION = click.option("--max-cycles", "max_cycles", type=click.IntRange(1, 1000),
                             default=None, help="Cycles at most (default 8).")  # fmt: skip
STEPS_OPTION = click.option("--max-steps", "max_steps", type=click.IntRange(1, 1000),
                            default=None, help="Steps per cycle at most (default 10).")  # fmt: skip
CONSTRAINT_OPTION = click.option("--constraint", "constraints", multiple=True,
                                 help="A constraint for the run (repeatable).")  # fmt: skip
MESSAGE_OPTION = click.option("--message", default=None,
                              help="Why (--reject), or what to change (--revise).")  # fmt: skip


def approve_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--approve / --reject / --revise: at most one; none of them is approval `none`."""
    for flag, what in (("--revise", "ask for a revision (with --message)"),
                       ("--reject", "reject the open gate (no terminal needed)"),
                       ("--approve", "approve the open gate: asks at the controlling "
                        "terminal, refused without one")):  # fmt: skip
        fn = click.option(flag, flag[2:], is_flag=True, help=what.capitalize() + ".")(fn)
    return fn


def chosen(approve: bool, reject: bool, revise: bool, message: str | None) -> tuple[str, str]:
    """(approval, via) for the flags given; a clear refusal for two of them."""
    picked = [n for n, on in (("approve", approve), ("reject", reject), ("revise", revise)) if on]
    if len(picked) > 1:
        raise UsageError("--approve, --reject and --revise exclude one another")
    if picked == ["revise"] and not (message or "").strip():
        raise UsageError("--revise needs --message: what the planner should change")
    if picked == ["approve"]:
        return "approve", "terminal"
    return (picked[0] if picked else "none"), "cli"


def read_items(path: Path) -> list[dict[str, Any]]:
    """The fan-out items: a JSON list of objects from a regular file of bounded size
    (a FIFO, a device or a directory is refused before anything is read from it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise UsageError(f"--items: cannot open {sanitize(str(path), 200)}: "
                         f"{exc.strerror}") from None  # fmt: skip
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError("--items must name a regular file")
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_ITEMS_FILE_BYTES + 1)
    if len(raw) > MAX_ITEMS_FILE_BYTES:
        raise UsageError(f"--items is larger than {MAX_ITEMS_FILE_BYTES} bytes")
    try:
        items = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UsageError("--items is not JSON (a list of items)") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UsageError("--items must hold a JSON list of objects (role, brief, …)")
    return items


# -- human output (pure: data -> lines) ---------------------------------------------------------


def s(value: Any, limit: int = SUMMARY_CHARS) -> str:
    return sanitize("" if value is None else str(value), limit)


def action_line(a: Data) -> str:
    owner = (a.get("owner") or {}).get("kind", "?")
    head = f"  - [{s(owner, 20)}] {s(a.get('label'), 120)}"
    if a.get("command"):
        return f"{head}: {s(a['command'], 600)}"
    if a.get("tool"):
        args = json.dumps(a.get("arguments") or {}, ensure_ascii=True, sort_keys=True)
        return f"{head}: tool {s(a['tool'], 60)} {s(args, 300)}"
    return head


def run_lines(data: Data) -> list[str]:
    """A run as a few lines: id, status, stop, gate, artifacts, responses, next actions."""
    rid = s(data.get("run_id"), 40)
    lines = [f"run {rid} ({s(data.get('kind'), 20)}, {s(data.get('mode'), 20)}): "
             f"{s(data.get('status'), 30)} at step {s(data.get('step'), 60)}"]  # fmt: skip
    if data.get("goal") or data.get("ticket"):
        lines.append(f"goal {s(data.get('goal'), 40)}, ticket {s(data.get('ticket'), 40)}")
    stop = data.get("stop")
    if stop or data.get("stop_reason"):
        lines.append(f"stop: {s(stop or '-', 30)}; {s(data.get('stop_reason') or '-')}")
    g = data.get("gate")
    if g:
        lines.append(f"gate: {s(g.get('kind'), 20)} for {s(g.get('role'), 30)}: "
                     f"{s(g.get('reason'), 300)}")  # fmt: skip
    for key in ("fanout_status", "consulted_role", "summoned_role", "parent_run", "reason"):
        if data.get(key):
            lines.append(f"{key.replace('_', ' ')}: {s(data[key])}")
    lines += extra_lines(data)
    arts = data.get("artifacts") or []
    if arts:
        shown = ", ".join(f"{s(a.get('ref'), 30)} ({s(a.get('kind'), 20)}, {a.get('bytes')} B)"
                          for a in arts)  # fmt: skip
        more = data.get("artifact_count", len(arts)) - len(arts)
        lines.append(f"artifacts: {shown}" + (f" (+{more} older)" if more > 0 else ""))
    for r in data.get("responses") or []:
        ok = "ok" if r.get("ok") else f"problem: {s(r.get('problem'), 120)}"
        lines.append(f"response from {s(r.get('role'), 40)} ({ok}): {s(r.get('summary'))}")
    for n, item in enumerate(data.get("items") or [], 1):
        if isinstance(item, dict):
            lines.append(f"item {n} {s(item.get('role'), 30)}: {s(item.get('status'), 30)} "
                         f"{s(item.get('stop_reason') or '')}".rstrip())  # fmt: skip
    acts = data.get("next_actions") or []
    if acts:
        lines.append("next:")
        lines += [action_line(a) for a in acts[:SHOWN_ACTIONS]]
    return lines


def extra_lines(data: Data) -> list[str]:
    """What a fan-out, a capture or a reconcile adds to a run's lines."""
    out = []
    b = data.get("bounds")
    if isinstance(b, dict):
        out.append(f"fan-out: {s(b.get('attempted'), 6)} of {s(b.get('requested'), 6)} "
                   f"attempted (cap {s(b.get('cap'), 6)})")  # fmt: skip
    c = data.get("captured")
    if isinstance(c, dict):
        how = "passed" if c.get("passed") else f"failed (exit {s(c.get('exit_code'), 12)})"
        if c.get("timed_out"):
            how = "timed out"
        out.append(f"captured: check {s(c.get('check'), 100)} {how} on "
                   f"{s(c.get('commit'), 12)[:12]} ({s(c.get('workspace'), 20)}), runtime "
                   f"evidence {s(c.get('ref'), 30)}")  # fmt: skip
    r = data.get("reconciliation")
    if isinstance(r, dict):
        out.append(f"reconciliation {s(r.get('ref'), 30)}: {s(r.get('status'), 20)}, "
                   f"{len(r.get('remaining') or [])} remaining")  # fmt: skip
        out += [f"  - next: {s(n)}" for n in (r.get("next") or [])[:5]]
    return out


def status_lines(data: Data) -> list[str]:
    lines = run_lines(data)
    counts = data.get("counts")
    if counts:
        lines.insert(1, "counts: " + ", ".join(f"{s(k, 30)} {s(v, 12)}" for k, v in counts.items()))
    events = data.get("recent_events") or []
    if events:
        lines.append("events: " + ", ".join(f"{s(e.get('n'), 8)} {s(e.get('kind'), 40)}"
                                            for e in events[-SHOWN_EVENTS:]))  # fmt: skip
    return lines


def list_lines(data: Data) -> list[str]:
    rows = data.get("runs") or []
    return [f"{s(r.get('run_id'), 40)} {s(r.get('kind'), 20)}/{s(r.get('mode'), 20)} "
            f"{s(r.get('status'), 30)} {s(r.get('updated'), 40)}"
            + (f": {s(r['stop_reason'], 120)}" if r.get("stop_reason") else "")
            for r in rows] or ["no runs"]  # fmt: skip


def artifact_lines(data: Data) -> list[str]:
    """The artifact's text, one sanitised line per line (a model wrote it)."""
    return [sanitize(line, 4000) for line in str(data.get("text", "")).splitlines()]


def _ran(data_code: tuple[dict[str, Any], int],
         lines: Callable[[Data], list[str]] = run_lines) -> Outcome:  # fmt: skip
    data, code = data_code
    return Outcome(data, code=code, lines=lines(data))


# -- the commands -----------------------------------------------------------------------------


@click.group(cls=FullHelpGroup)
def run() -> None:
    """Runs: plan, orchestrate, consult, summon, fanout, continue, loop, reconcile, abort."""
    # (its help is the command table's, tests/unit/cli/test_lazy.py). Nothing in the group
    # approves but `continue --approve` at a controlling terminal.


@run.command("plan")
@REPO_OPTION
@click.argument("goal")
@click.option("--orchestrator", default=None, help="A role name or provider:model to plan.")
@CONSTRAINT_OPTION
@click.option("--auto-loop", "auto_loop", is_flag=True, help="Advance it as `oms run loop`.")
@CYCLES_OPTION
@STEPS_OPTION
@command
def run_plan(repo: Path, goal: str, orchestrator: str | None, constraints: Sequence[str],
             auto_loop: bool, max_cycles: int | None,
             max_steps: int | None) -> Outcome:  # fmt: skip
    """A read-only plan run: the planner answers, the plan is an artifact."""
    from gatekeeper.work.runs import api

    out = api.plan(repo, goal, orchestrator, constraints, auto_loop, max_cycles, max_steps)
    return _ran(out)


@run.command("orchestrate")
@REPO_OPTION
@click.argument("goal")
@click.option("--mode", required=True, help="plan, research, implement or review.")
@click.option("--role", "role_pairs", multiple=True, metavar="RUN_ROLE=VALUE",
              help="Which role (name or provider:model) plays a run role "
              "(repeatable).")  # fmt: skip
@CONSTRAINT_OPTION
@click.option("--auto-loop", "auto_loop", is_flag=True, help="Advance it as `oms run loop`.")
@CYCLES_OPTION
@STEPS_OPTION
@command
def run_orchestrate(repo: Path, goal: str, mode: str, role_pairs: Sequence[str],
                    constraints: Sequence[str], auto_loop: bool, max_cycles: int | None,
                    max_steps: int | None) -> Outcome:  # fmt: skip
    """A full run in MODE; implement goes through the core's lease, dispatch and verify."""
    from gatekeeper.work.runs import api

    mapping: dict[str, str] = {}
    for pair in role_pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"--role takes RUN_ROLE=VALUE, not {sanitize(pair, 60)!r}")
        mapping[name] = value
    return _ran(api.orchestrate(repo, goal, mode, mapping or None, constraints, auto_loop,
                                max_cycles, max_steps))  # fmt: skip


@run.command("consult")
@REPO_OPTION
@click.argument("goal")
@click.option("--role", required=True, help="orchestrator, planner, researcher, qa or critic.")
@click.option("--agent", default=None, help="A role name or provider:model, for this call.")
@CONSTRAINT_OPTION
@command
def run_consult(repo: Path, goal: str, role: str, agent: str | None,
                constraints: Sequence[str]) -> Outcome:  # fmt: skip
    """One read-only guest role, now: its answer is an artifact, its summary shown."""
    from gatekeeper.work.runs import api

    return _ran(api.consult(repo, goal, role, agent, constraints))


@run.command("summon")
@REPO_OPTION
@click.argument("run_id")
@click.option("--role", required=True, help="A read-only role for the existing run.")
@click.option("--brief", required=True, help="What the role is asked (data, never argv).")
@click.option("--agent", default=None, help="A one-call override; the run's mapping stays.")
@click.option("--kind", default=None, help="review, qa, critique, research or plan.")
@click.option("--persona", default=None, help="A short role brief.")
@CONSTRAINT_OPTION
@click.option("--evidence", "evidence_refs", multiple=True, help="An artifact ref of the run.")
@command
def run_summon(repo: Path, run_id: str, role: str, brief: str, agent: str | None,
               kind: str | None, persona: str | None, constraints: Sequence[str],
               evidence_refs: Sequence[str]) -> Outcome:  # fmt: skip
    """A read-only, advisory role onto an existing run (recorded as agent_summoned)."""
    from gatekeeper.work.runs import guests

    return _ran(guests.summon(repo, run_id, role, brief, agent, kind, persona, constraints,
                              evidence_refs))  # fmt: skip


@run.command("fanout")
@REPO_OPTION
@click.argument("run_id")
@click.option("--items", "items_file", type=click.Path(path_type=Path), required=True,
              help="A regular file holding a JSON list of items (role, brief, …).")  # fmt: skip
@click.option("--max-items", "max_items", type=int, default=None,
              help="At most this many (policy may lower it; never above 8).")  # fmt: skip
@command
def run_fanout(repo: Path, run_id: str, items_file: Path, max_items: int | None) -> Outcome:
    """Up to 8 read-only summons, advisory only: they satisfy no gate."""
    from gatekeeper.work.runs import guests

    return _ran(guests.fanout(repo, run_id, read_items(items_file), max_items))


@run.command("continue")
@REPO_OPTION
@click.argument("run_id")
@approve_option
@MESSAGE_OPTION
@command
def run_continue(repo: Path, run_id: str, approve: bool, reject: bool, revise: bool,
                 message: str | None) -> Outcome:  # fmt: skip
    """Advance a run to its next gate or end; decide its open gate first if asked."""
    from gatekeeper.work.runs import flow

    approval, via = chosen(approve, reject, revise, message)
    return _ran(flow.continue_run(repo, run_id, approval, message, via=via))


@run.command("loop")
@REPO_OPTION
@click.argument("run_id")
@CYCLES_OPTION
@STEPS_OPTION
@command
def run_loop(repo: Path, run_id: str, max_cycles: int | None, max_steps: int | None) -> Outcome:
    """Advance until terminal, a manual gate, no progress or the cycle cap; never approves."""
    from gatekeeper.work.runs import flow

    return _ran(flow.loop_run(repo, run_id, max_cycles, max_steps))


@run.command("reconcile")
@REPO_OPTION
@click.argument("run_id")
@click.option("--role", default=None, help="planner (default) or orchestrator.")
@approve_option
@MESSAGE_OPTION
@command
def run_reconcile(repo: Path, run_id: str, role: str | None, approve: bool, reject: bool,
                  revise: bool, message: str | None) -> Outcome:  # fmt: skip
    """A completed run's progress packet to the planner, after its manifest is approved."""
    from gatekeeper.work.runs import reconcile

    approval, via = chosen(approve, reject, revise, message)
    return _ran(reconcile.reconcile(repo, run_id, role, approval, message, via=via))


@run.command("abort")
@REPO_OPTION
@click.argument("run_id")
@click.option("--reason", required=True, help="Why, recorded with the run.")
@command
def run_abort(repo: Path, run_id: str, reason: str) -> Outcome:
    """Stop a run for good (aborted)."""
    from gatekeeper.work.runs import flow

    return _ran(flow.abort(repo, run_id, reason))


@run.command("status")
@REPO_OPTION
@click.argument("run_id")
@click.option("--full", is_flag=True, help="Every artifact and event.")
@command
def run_status(repo: Path, run_id: str, full: bool) -> Outcome:
    """One run: state, counts, recent events, artifacts, next actions."""
    from gatekeeper.work.runs import api

    return _ran(api.status(repo, run_id, "full" if full else "summary"), status_lines)


@run.command("list")
@REPO_OPTION
@click.option("--limit", type=int, default=20, show_default=True, help="1 to 100.")
@click.option("--full", is_flag=True, help="Objective, roles, ticket and counts too.")
@command
def run_list(repo: Path, limit: int, full: bool) -> Outcome:
    """The newest runs of the repository."""
    from gatekeeper.work.runs.listing import list_runs  # reads only: no fence, no run model

    return _ran(list_runs(repo, limit, "full" if full else "summary"), list_lines)


@run.command("artifact")
@REPO_OPTION
@click.argument("run_id")
@click.argument("ref")
@click.option("--offset", type=int, default=0, show_default=True)
@click.option("--max-bytes", "max_bytes", type=int, default=20_000, show_default=True)
@command
def run_artifact(repo: Path, run_id: str, ref: str, offset: int, max_bytes: int) -> Outcome:
    """Part of an artifact recorded on that run (and of nothing else)."""
    from gatekeeper.work.runs import api

    data, code = api.read_artifact(repo, run_id, ref, offset, max_bytes)
    if data.get("next_offset") is not None:  # stderr: stdout is the artifact's text
        click.echo(f"oms: more from --offset {data['next_offset']}", err=True)
    return Outcome(data, code=code, lines=artifact_lines(data))


@run.command("capture")
@REPO_OPTION
@click.argument("run_id")
@click.argument("check")
@command
def run_capture(repo: Path, run_id: str, check: str) -> Outcome:
    """Run a check of the trusted plan on the run's workspace; attach its output."""
    from gatekeeper.work.runs import capture

    return _ran(capture.capture(repo, run_id, check))
