"""`oms hook claude-code|codex EVENT`: the agent clients' hooks, answered in their own
protocols (docs/hooks.md). `run_hook` is the one entry: stdin bytes in, the answer out,
and never an allow on error."""

from __future__ import annotations

import os

from gatekeeper.errors import known_kind
from gatekeeper.errors import refusal as as_refusal
from gatekeeper.integrations.hooks import protocol
from gatekeeper.integrations.hooks.checks import Session
from gatekeeper.integrations.hooks.claude import CLAUDE
from gatekeeper.integrations.hooks.codex import CODEX
from gatekeeper.integrations.hooks.events import HANDLERS, ClientSpec, refusal
from gatekeeper.integrations.hooks.protocol import HookAnswer, parse_input

SPECS: dict[str, ClientSpec] = {"claude-code": CLAUDE, "codex": CODEX}


def run_hook(client: str, event: str, stdin: bytes, *, in_sandbox: bool,
             may_allow: bool = False) -> HookAnswer:  # fmt: skip
    """The answer to one hook call. Any failure refuses in the event's own form.
    `may_allow` (inside an unattended worker's run only): a call that passes is `allow`."""
    spec = SPECS.get(client)
    handler = HANDLERS.get(event)
    if spec is None or handler is None:
        known = ", ".join(HANDLERS)
        return protocol.blocking_error(f"oms hook: unknown client or event {client} {event} "
                                       f"(events: {known})")  # fmt: skip
    try:
        hook = parse_input(stdin, event)
        session = Session.of(hook.cwd or os.getcwd(), in_sandbox=in_sandbox,
                             may_allow=may_allow)  # fmt: skip
        return handler(spec, hook, session)
    except Exception as exc:  # fail closed on anything, a bug included
        # A bug's text may quote the input (a secret): only its type is shown.
        bug = f"internal error {type(exc).__name__}"
        why = as_refusal(exc).message if known_kind(exc) else bug
        return refusal(event, f"oms could not check this, so it is refused: {why}")


__all__ = ["HookAnswer", "run_hook"]
