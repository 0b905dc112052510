"""The scripted model turns of the unattended loop (tests/e2e/test_unattended.py): the
conductor's, and those of the real Claude Code and Codex workers.

A stand-in for a model provider, which cannot be contacted here: the real CLIs run, only
the model's answers are scripted. Every answer is decided from the request's content (the
tools it offers, the tool results and the wake line in its messages), never from the order
of requests: the CLIs make side calls (a session title, a pre-connect probe).

One Messages fake serves the conductor and a Claude Code worker (they share the broker's
upstream): the conductor is the one offered the bridge's tools (`mcp__oms__propose_goal`…,
or, before its server connects, WaitForMcpServers) and no writing tool; a worker is
offered Bash and the editing tools; a side call is offered none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from support.fake_models import (
    WAIT_MCP,
    FakeModel,
    anthropic_call,
    anthropic_events,
    anthropic_text,
    openai_events,
)

# The worker's one tool call in a real CLI's shell (Claude Code's Bash, Codex's
# exec_command): start and end markers around its work, committed in its clone.
WORKER_SHELL = (
    "printf 'oms-worker-start\\n' > start.marker && "
    'printf \'oms-worker-end %s\\n\' "$(wc -c < "$OMS_TASK_FILE")" > end.marker && '
    "git add start.marker end.marker && "
    "git -c user.name=worker -c user.email=worker@example.invalid commit -q -m markers"
)
WAKE = re.compile(r'\{"notification": "n-[0-9a-f]{12}", "dispatchable": \[[^\]]*\]\}')
MCP = "mcp__oms__"
MAX_CALLS = 400  # a runaway script ends its turn instead of calling on


@dataclass(frozen=True)
class Call:
    """One tool call the conductor made and what came back (None: no result yet)."""

    name: str
    args: dict[str, Any]
    result: Any  # the parsed JSON answer, or None for a refusal or a non-JSON answer
    refused: bool


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)


def _result_json(block: dict[str, Any]) -> Any:
    """A tool's answer: the bridge's `{ok, truncated, data}` document's `data` (Claude Code
    may append a `<system-reminder>` after it in the same result)."""
    text = "".join(_texts(block.get("content")))
    try:
        doc, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None
    return doc.get("data") if isinstance(doc, dict) else None


def calls(body: dict[str, Any]) -> list[Call]:
    """The conductor's tool calls in this request's history, each with its result."""
    uses: dict[str, tuple[str, dict[str, Any]]] = {}
    order: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    for msg in body.get("messages", []):
        content = msg.get("content")
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_use":
                uses[b["id"]] = (str(b["name"]).removeprefix(MCP), b.get("input") or {})
                order.append(b["id"])
            elif b.get("type") == "tool_result":
                results[b.get("tool_use_id", "")] = b
    out = []
    for uid in order:
        name, args = uses[uid]
        got = results.get(uid)
        refused = got is None or bool(got.get("is_error"))
        out.append(Call(name, args, None if refused else _result_json(got or {}), refused))
    return out


def wakes(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every wake line `oms conductor wait-event` handed the conductor, oldest first."""
    for t in _texts(body.get("messages", [])):
        for m in WAKE.finditer(t):
            yield dict(json.loads(m.group(0)))


def woken(body: dict[str, Any], at_least: int = 1) -> dict[str, Any] | None:
    """The first wake line that listed at least `at_least` dispatchable tickets, if any.
    (A sync's own batch may wake the conductor before all its tickets exist; each ticket's
    `work.ticket` notification wakes it again, listing those made by then.)"""
    return next((w for w in wakes(body) if len(w["dispatchable"]) >= at_least), None)


def verifying(body: dict[str, Any]) -> set[str]:
    """The tickets a wake line said are `verifying` (a receipt woke the conductor)."""
    return {t["ticket"] for w in wakes(body) for t in w["dispatchable"]
            if t["state"] == "verifying"}  # fmt: skip


# What each tool's answer holds when it did its work (anything else is a refusal).
ANSWERS = {
    "prepare_dispatch": "digest",
    "advise_dispatch": "verdict",
    "propose_dispatch": "dispatch",
    "start_team": "team",
    "process_result": "decision",
}


def _ok(made: Sequence[Call], name: str, **match: Any) -> Call | None:
    """The last call of `name` (with these arguments) that did its work."""
    for c in reversed(made):
        if (
            c.name == name
            and isinstance(c.result, dict)
            and ANSWERS[name] in c.result
            and all(c.args.get(k) == v for k, v in match.items())
        ):
            return c
    return None


def stuck(made: Sequence[Call]) -> str | None:
    """The tool refused in this history (but a wait for the MCP server)."""
    for c in made:
        if c.refused and c.name != WAIT_MCP:
            return c.name
    return None


@dataclass(frozen=True)
class ConductorScript:
    """The conductor's turns: a goal, then, once woken with one dispatchable ticket per role,
    for each (ticket i gets `roles[i]`) prepare (attaching it to that goal) -> advise ->
    propose, one start_team for all, and process_result for each once a wake line says
    it is verifying."""

    goal: dict[str, Any]
    roles: tuple[str, ...]
    task: str = "Write the start and end markers and commit them, as the ticket says."
    transfers: tuple[str, ...] = ()  # per role: the approved transfer an external role needs

    def next_call(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        made = calls(body)
        if len(made) >= MAX_CALLS or stuck(made) is not None:
            return None  # end the turn: a refusal here is the test's failure, not a retry
        goal = next((c.result["goal"] for c in made if c.name == "propose_goal"
                     and isinstance(c.result, dict)), None)  # fmt: skip
        if goal is None:
            return "propose_goal", self.goal
        wake = woken(body, len(self.roles))
        if wake is None:
            return None  # end the turn; the Stop hook arms the waiter again
        tickets = wake["dispatchable"][: len(self.roles)]
        dispatches: list[str] = []
        for i, t in enumerate(tickets):
            prep = _ok(made, "prepare_dispatch", ticket=t["ticket"])
            if prep is None:
                args = {"goal": goal, "ticket": t["ticket"], "role": self.roles[i],
                        "task": self.task}  # fmt: skip
                if t["goal"] != goal:  # a GitHub ticket in the standing goal
                    args["attach_from"] = t["goal"]
                if not any(c.name == "prepare_dispatch" for c in made):
                    args["notification"] = wake["notification"]
                if self.transfers:
                    args["transfer"] = self.transfers[i]
                return "prepare_dispatch", args
            intent = {"intent": prep.result["intent"], "digest": prep.result["digest"]}
            if _ok(made, "advise_dispatch", intent=intent["intent"]) is None:
                return "advise_dispatch", intent
            accepted = _ok(made, "propose_dispatch", intent=intent["intent"])
            if accepted is None:
                return "propose_dispatch", intent
            dispatches.append(accepted.result["dispatch"])
        if dispatches and _ok(made, "start_team") is None:
            return "start_team", {"dispatches": dispatches}
        ready = verifying(body)
        for t in tickets:
            if t["ticket"] in ready and _ok(made, "process_result", ticket=t["ticket"]) is None:
                return "process_result", {"ticket": t["ticket"]}
        return None  # end the turn; a receipt's notification wakes it

    def answer(self, body: dict[str, Any]) -> list[bytes]:
        names = offered(body)
        if f"{MCP}propose_goal" not in names:
            if WAIT_MCP in names:  # its server has not connected yet: wait for it
                return anthropic_call(body, f"toolu_oms_wait_{len(calls(body))}", WAIT_MCP, {})
            return anthropic_text(body, "oms fake title")
        step = self.next_call(body)
        if step is None:
            return anthropic_text(body, "oms-fake conductor: nothing to do until woken")
        n = len(calls(body))
        args = {**step[1], "nonce": f"unattended-{n}"}
        return anthropic_call(body, f"toolu_oms_c{n}", MCP + step[0], args)


def offered(body: dict[str, Any]) -> set[str]:
    return {str(t.get("name")) for t in body.get("tools", []) if isinstance(t, dict)}


def is_conductor(body: dict[str, Any]) -> bool:
    """The conductor is offered no writing tool, and the bridge's tools or (while its
    server connects) WaitForMcpServers; a worker is offered Edit (and maybe oms' own
    `mcp__oms__*` gate tools, never the bridge's)."""
    names = offered(body)
    return "Edit" not in names and (f"{MCP}propose_goal" in names or WAIT_MCP in names)


def messages_fake(script: ConductorScript) -> FakeModel:
    """One Messages fake for the conductor and a Claude Code worker (Bash WORKER_SHELL, then
    end_turn once its result is back)."""

    def answer(body: dict[str, Any], _: object) -> list[bytes]:
        if is_conductor(body):
            return script.answer(body)
        return anthropic_events(body, WORKER_SHELL)

    return FakeModel("/v1/messages", answer, None)


def responses_fake() -> FakeModel:
    """The Responses fake for a Codex `codex exec` worker: exec_command(WORKER_SHELL), then
    a final message once its output is back."""
    return FakeModel("/v1/responses", lambda body, _: openai_events(body, WORKER_SHELL), None)
