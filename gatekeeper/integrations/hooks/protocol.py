"""The hook protocols of Claude Code and Codex: their stdin JSON as one frozen model, and
oms' answer written in each client's own form (docs/hooks.md cites the references).

Both clients send one JSON object on stdin and read the hook's exit code, stdout and
stderr. Both block a tool call on exit 0 with `hookSpecificOutput.permissionDecision:
"deny"` and a `permissionDecisionReason`, give feedback after a tool with `{"decision":
"block", "reason"}`, keep the agent working at Stop with the same object, and take
`hookSpecificOutput.additionalContext` at SessionStart. Exit 2 with the reason on stderr
blocks in both, for every event that can block: oms uses it only where it cannot form the
event's own JSON (an unknown event, an answer that cannot be written).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gatekeeper.errors import UsageError
from gatekeeper.text import sanitize

Client = Literal["claude-code", "codex"]
CLIENTS: tuple[Client, ...] = ("claude-code", "codex")
EVENTS = ("PreToolUse", "PostToolUse", "Stop", "SubagentStop", "SessionStart")
# A Write of a large file arrives whole on stdin; more than this is refused, not truncated.
STDIN_MAX = 32 << 20
# Reasons the model reads: one paragraph, never a wall of text.
REASON_MAX = 1500
# Lines shown after a reason (a failing check's output tail): each sanitised and bounded.
DETAIL_LINE_MAX = 400
DETAIL_MAX = 8192
EXIT_BLOCK = 2  # both clients: "blocking error", stderr is the reason


class HookInputError(UsageError):
    """The client's hook JSON cannot be read: the hook denies rather than guess."""


@dataclass(frozen=True)
class HookInput:
    """What oms reads of one hook call (the clients send more; the rest is ignored, since
    each release adds fields). A dataclass, not a model: every tool call pays for the
    hook's imports (issue 33), and these few fields are checked by `parse_input`."""

    session_id: str = ""
    cwd: str = ""
    hook_event_name: str = ""
    tool_name: str = ""
    tool_input: Any = None  # a mapping for every tool oms reads; anything for others
    tool_response: Any = None
    stop_hook_active: bool = False


# The text fields oms reads, and the most characters each may hold.
_TEXT_MAX = {"session_id": 512, "cwd": 4096, "hook_event_name": 64, "tool_name": 512}


def _field(raw: Mapping[str, Any], name: str) -> Any:
    """One field of the client's object, checked; HookInputError names a field that is not."""
    if name == "stop_hook_active":
        value = raw.get(name, False)
        ok = isinstance(value, bool)
    else:
        value = raw.get(name, "")
        ok = isinstance(value, str) and len(value) <= _TEXT_MAX[name]
    if not ok:
        raise HookInputError(f"the hook input has an unusable field: {name}")
    return value


def parse_input(data: bytes, event: str) -> HookInput:
    """The client's stdin as a HookInput; HookInputError on anything else.

    The event named on the command line is the one answered; a body naming another event
    means a miswired config, which is refused.
    """
    if len(data) > STDIN_MAX:
        raise HookInputError(f"the hook input is over {STDIN_MAX >> 20} MiB")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise HookInputError("the hook input on stdin is not JSON") from None
    if not isinstance(raw, dict):
        raise HookInputError("the hook input on stdin is not a JSON object")
    parsed = HookInput(
        **{name: _field(raw, name) for name in (*_TEXT_MAX, "stop_hook_active")},
        tool_input=raw.get("tool_input"),
        tool_response=raw.get("tool_response"),
    )
    if parsed.hook_event_name and parsed.hook_event_name != event:
        raise HookInputError(
            f"the hook is installed for {event} but was sent {sanitize(parsed.hook_event_name)}"
        )
    return parsed


@dataclass(frozen=True)
class HookAnswer:
    """What the hook process does: its exit code, stdout and stderr, in the client's form."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


def reason_text(reason: str) -> str:
    """A reason as the model and the user will read it: sanitised, one bounded line."""
    return sanitize(reason, REASON_MAX)


def detail_text(detail: str) -> str:
    """Lines shown below a reason: each sanitised (controls shown as \\uXXXX), the whole
    bounded; newlines kept, so that output reads as output."""
    text = "\n".join(sanitize(line, DETAIL_LINE_MAX) for line in detail.split("\n"))
    return text[-DETAIL_MAX:]


def _json(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n"


def allow() -> HookAnswer:
    """No objection: exit 0, nothing on stdout (both clients then carry on as usual)."""
    return HookAnswer()


def allow_tool(reason: str) -> HookAnswer:
    """PreToolUse: this tool call passed oms' checks and runs without asking. Only ever
    answered inside an oms agent sandbox (events.py), never on the host."""
    return HookAnswer(stdout=_json({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": reason_text(reason),
    }}))  # fmt: skip


def decision_of(answer: HookAnswer) -> str:
    """The answer in one word, for the record: allow, deny, block, silent or error."""
    if answer.exit_code != 0:
        return "error"
    if not answer.stdout.strip():
        return "silent"
    try:
        doc = json.loads(answer.stdout)
    except ValueError:
        return "error"
    spec = doc.get("hookSpecificOutput") if isinstance(doc, dict) else None
    if isinstance(spec, dict) and spec.get("permissionDecision") in ("allow", "deny"):
        return str(spec["permissionDecision"])
    return "block" if isinstance(doc, dict) and doc.get("decision") == "block" else "silent"


def deny_tool(reason: str) -> HookAnswer:
    """PreToolUse: refuse this one tool call; the reason goes to the model."""
    return HookAnswer(stdout=_json({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": reason_text(reason),
    }}))  # fmt: skip


def block(reason: str, detail: str = "") -> HookAnswer:
    """PostToolUse feedback, or Stop / SubagentStop kept going: `decision: block`; `detail`
    (already redacted) follows the reason on lines of its own."""
    text = reason_text(reason) + (f"\n{detail_text(detail)}" if detail else "")
    return HookAnswer(stdout=_json({"decision": "block", "reason": text}))


def stop_allowed(note: str | None = None) -> HookAnswer:
    """Stop allowed; `note` is shown to the user (`systemMessage`), not to the model."""
    if note is None:
        return allow()
    return HookAnswer(stdout=_json({"systemMessage": reason_text(note)}))


def context(event: str, text: str) -> HookAnswer:
    """SessionStart: text added to the agent's context."""
    return HookAnswer(stdout=_json({"hookSpecificOutput": {
        "hookEventName": event,
        "additionalContext": reason_text(text),
    }}))  # fmt: skip


def blocking_error(reason: str) -> HookAnswer:
    """Exit 2 with the reason on stderr: both clients' blocking error, for every event."""
    return HookAnswer(exit_code=EXIT_BLOCK, stderr=reason_text(reason) + "\n")
