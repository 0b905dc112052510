"""What the conductor's and the workers' panes run: fixed argv, generated config.

The conductor is its role's CLI under `oms agent run` with a read-only workspace and
`conductor=<id>`. For Claude Code (interactive) the argv is fixed here: the model, the
`dontAsk` permission mode, allowed tools = the bridge's seven `mcp__oms__…` tools plus
read-only diagnostics, disallowed = every writing tool and raw tmux, SessionStart and Stop
hooks that arm `oms conductor wait-event` (async, waking the conductor when it returns),
and a fixed opening prompt. `oms agent run` adds the strict MCP config whose only server,
`oms`, is `oms conductor bridge --session <id>` (agent/run.py, kinds.py). `check_launch`
refuses print mode, the Agent SDK's stream transports and a credit-billed model, whatever
produced the argv.

A worker pane runs `oms conductor worker` (this very oms, from its own source), which runs
the executor the same way: a `command:` provider's policy argv, or the CLI with a fixed
prompt naming `$OMS_TASK_FILE`; the task text itself is never argv. A Codex worker with an
API key (or no auth) runs `codex exec`, which ends by itself, and a later attempt of its
ticket resumes the ticket's session (`codex exec resume`); a subscription one keeps the
attended TUI.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from evidence import state_root
from evidence.state import ensure_private_dir
from gatekeeper.agent.budget import Bound
from gatekeeper.agent.codex_sessions import stored_session
from gatekeeper.agent.kinds import INSIDE_OMS
from gatekeeper.agent.payloads import AgentKind, EgressMode
from gatekeeper.agent.run import SOURCE, AgentRunRequest
from gatekeeper.agent.worker_route import EndRule
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.repo.git import open_repo
from gatekeeper.work.conductor.sessions import checked_id
from gatekeeper.work.conductor.tokens import conductor_dir
from gatekeeper.work.model import TICKET_ID_RE, Dispatch
from gatekeeper.work.providers.base import Role, RoleUnavailable
from gatekeeper.work.providers.codex_cli import EGRESS, exec_argv
from gatekeeper.work.roles import UNATTENDED_AUTH

CONDUCTOR_TOOLS = ("propose_goal", "prepare_dispatch", "advise_dispatch", "propose_dispatch",
                   "manage_worker", "start_team", "process_result")  # fmt: skip
DIAGNOSTICS = ("Read", "Grep", "Glob", "Bash(git status)", "Bash(git log:*)", "Bash(git diff:*)")
# `--tools`: the only built-in tools the model is offered at all (`--allowedTools` only
# pre-approves; without this, Agent, WebFetch, WebSearch, Cron*, Skill… are offered too).
# WaitForMcpServers (read-only): an interactive session's first turn goes out before the
# bridge has connected, and this is how the model waits for the oms tools.
BUILTINS = ("Read", "Grep", "Glob", "Bash", "WaitForMcpServers")
# (Claude Code 2.1.197 has no MultiEdit tool: a deny rule naming it is warned about.)
DISALLOWED = ("Edit", "Write", "NotebookEdit", "Bash(tmux:*)", "Bash(tmux)")
# Words that would turn an interactive session into print mode or the Agent SDK's transport.
_PRINT = ("-p", "--print", "--output-format", "--input-format", "--sdk-url")
CONDUCTOR_PROMPT = (
    "You are the oms conductor. Use only the oms tools to propose goals and "
    "dispatches, and to manage workers; re-read canonical state when woken."
)
WORKER_PROMPT = (
    "Your task is the JSON document in the file named by the OMS_TASK_FILE "
    "environment variable. Read it, do the work in this repository, and commit."
)


def oms_argv(*args: str) -> list[str]:
    """`oms ARGS` outside: this interpreter and this oms' own source (isolated mode)."""
    boot = (f"import sys; sys.path.insert(0, {str(SOURCE)!r}); "
            "from gatekeeper.cli.main import main; main()")  # fmt: skip
    return [sys.executable, "-I", "-c", boot, *args]


def worker_pane_argv(top: Path, worker_id: str) -> list[str]:
    return oms_argv("conductor", "worker", "--repo", str(top), "--worker", worker_id)


def conductor_pane_argv(top: Path, conductor_id: str) -> list[str]:
    return oms_argv("conductor", "pane", "--repo", str(top), "--session", checked_id(conductor_id))


def mcp_tools() -> list[str]:
    return [f"mcp__oms__{t}" for t in CONDUCTOR_TOOLS]


def conductor_settings(conductor_id: str) -> dict[str, object]:
    """Claude Code `--settings`: the hooks that arm the waiter (run inside, through the
    in-sandbox `oms`, which the broker relays)."""
    cid = checked_id(conductor_id)
    hook = {"type": "command", "command": f"{INSIDE_OMS[0]} conductor wait-event --session {cid}",
            "async": True, "asyncRewake": True}  # fmt: skip
    return {"hooks": {"SessionStart": [{"hooks": [hook]}], "Stop": [{"hooks": [hook]}]}}


def conductor_argv(role: Role, conductor_id: str) -> tuple[str, ...]:
    """The conductor's CLI argv (before `oms agent run` adds its MCP config)."""
    if role.provider.startswith("command:"):
        argv: tuple[str, ...] = role.cmd
    elif role.provider == "claude-code":
        argv = ("claude", "--model", role.model, "--permission-mode", "dontAsk",
                "--tools", ",".join(BUILTINS),
                "--allowedTools", ",".join([*mcp_tools(), *DIAGNOSTICS]),
                "--disallowedTools", ",".join(DISALLOWED),
                "--settings", json.dumps(conductor_settings(conductor_id), sort_keys=True),
                CONDUCTOR_PROMPT)  # fmt: skip
    else:
        raise RoleUnavailable(f"role {role.name}: a conductor is Claude Code (interactive) or "
                              "a command: provider")  # fmt: skip
    check_launch(role, argv)
    return argv


def check_launch(role: Role, argv: Sequence[str]) -> None:
    """Refuse print mode, the Agent SDK and a credit-billed model for the conductor."""
    if not argv:
        raise RoleUnavailable(f"role {role.name}: no command to launch")
    for word in argv[1:]:
        if word.split("=", 1)[0] in _PRINT:
            raise Blocked(
                f"the conductor's launch has {word.split('=', 1)[0]}: a conductor "
                "is an interactive session, never print mode or the Agent SDK"
            )
    if role.billing == "usage":
        raise Blocked(f"role {role.name} is credit-billed: the conductor never runs on a "
                      "credit-billed model")  # fmt: skip
    if role.provider == "claude-code" and role.transport != "interactive":
        raise Blocked(f"role {role.name}: a claude-code conductor is interactive")


def conductor_request(role: Role, top: Path, conductor_id: str, base: str) -> AgentRunRequest:
    argv = conductor_argv(role, conductor_id)
    agent: AgentKind = "claude-code" if role.provider == "claude-code" else "command"
    return AgentRunRequest(repo_dir=top, cmd=argv, agent=agent,
                           egress="none" if agent == "command" else _egress(role), base_ref=base,
                           read_only=True, conductor=checked_id(conductor_id))  # fmt: skip


# An unattended Claude Code worker (docs/conductor.md "Worker panes"): edits accepted by
# the CLI, every other call allowed by oms' own PreToolUse hook inside the sandbox (the
# run's settings.json, agent/kinds.py); only tools that hook's matcher covers are offered.
WORKER_TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob")


def executor_request(role: Role, top: Path, d: Dispatch, document: bytes, worker_id: str,
                     timeout_s: int,
                     end_rule: EndRule | None = None,
                     budget: tuple[Bound, ...] = ()) -> AgentRunRequest:  # fmt: skip
    """The executor's run for dispatch `d`, with the pane as its terminal; its broker holds
    it to `budget`. `end_rule`: a Claude Code worker eligible to run unattended
    (roles.check with worker_pane), ended by that rule once its receipt's commit is there
    and nobody is attached."""
    if role.provider.startswith("command:"):
        if not role.cmd:
            raise RoleUnavailable(f"role {role.name}: provider {role.provider} has no command")
        egress: EgressMode = "api" if role.egress == "api" else "none"
        return AgentRunRequest(repo_dir=top, cmd=role.cmd, agent="command", egress=egress,
                               base_ref=d.envelope.base, run_id=d.run_id, task_file=document,
                               timeout_s=timeout_s, worker=worker_id,
                               budget=budget)  # fmt: skip
    agent: AgentKind
    if role.provider == "claude-code" and end_rule is not None:
        # `--tools` takes several values: a one-value flag must stand before the prompt.
        cmd: tuple[str, ...] = ("claude", "--model", role.model, "--tools",
                                ",".join(WORKER_TOOLS), "--permission-mode", "acceptEdits",
                                WORKER_PROMPT)  # fmt: skip
        agent = "claude-code"
    elif role.provider == "claude-code":
        cmd = ("claude", "--model", role.model, WORKER_PROMPT)
        agent = "claude-code"
    elif role.provider == "codex-cli":
        if role.auth in UNATTENDED_AUTH:
            return codex_worker_request(role, top, d, document, worker_id, timeout_s, budget)
        # A subscription login never runs unattended: its TUI waits for a human at the pane.
        cmd, agent = ("codex", "--model", role.model, WORKER_PROMPT), "codex"
    else:
        raise RoleUnavailable(f"role {role.name}: no worker launch for {role.provider}")
    return AgentRunRequest(repo_dir=top, cmd=cmd, agent=agent, egress=_egress(role),
                           base_ref=d.envelope.base, run_id=d.run_id, task_file=document,
                           timeout_s=timeout_s, worker=worker_id, role=role.name,
                           end_rule=end_rule, budget=budget)  # fmt: skip


def codex_store(top: Path, ticket: str) -> Path:
    """The ticket's Codex session store, owner-only under `$OMS_HOME` (never the repo's)."""
    if not TICKET_ID_RE.fullmatch(ticket):
        raise UsageError(f"not a ticket id: {ticket[:40]!r}")
    store = conductor_dir(open_repo(top).repo_id) / "codex" / ticket
    ensure_private_dir(store, state_root())
    return store


def codex_worker_request(role: Role, top: Path, d: Dispatch, document: bytes, worker_id: str,
                         timeout_s: int,
                         budget: tuple[Bound, ...] = ()) -> AgentRunRequest:  # fmt: skip
    """An api-key (or no-auth) Codex worker: `codex exec` with the exec provider's flags,
    ending by itself, its stdin /dev/null and its text output in the pane; a later attempt of
    the same ticket resumes that ticket's stored session (`codex exec resume`)."""
    store = codex_store(top, d.ticket)
    cmd = exec_argv(role, events=False, prompt=WORKER_PROMPT, resume=stored_session(store))
    return AgentRunRequest(repo_dir=top, cmd=cmd, agent="codex", egress=EGRESS[role.auth],
                           base_ref=d.envelope.base, run_id=d.run_id, task_file=document,
                           timeout_s=timeout_s, worker=worker_id, role=role.name,
                           no_input=True, codex_sessions=store, budget=budget)  # fmt: skip


def _egress(role: Role) -> EgressMode:
    """A subscription login goes through the CONNECT tunnel (no key at all); an api-key
    role through the broker, which injects the key."""
    return "tunnel" if role.auth == "subscription" else "api"
