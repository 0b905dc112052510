"""The `oms` root group and `main()`: a static table of commands, each imported on demand.

`oms --help` and `oms release status` must start in about the time Python itself does, so
the root imports click and this package only: a command's module (and the gates, scanners,
pydantic models and MCP SDK behind it) is imported when that command runs (click's
documented LazyGroup pattern). The table's short help is what `oms --help` prints; a test
holds it equal to each command's own help.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import click

from gatekeeper.agent.inside import SOCKET, inside_agent_sandbox
from gatekeeper.cli.options import full_help_rows
from gatekeeper.cli.render import emit_error

# name -> ("module:attribute", short help). Sorted by name, as click lists commands.
COMMANDS: Mapping[str, tuple[str, str]] = {
    "agent": (
        "gatekeeper.cli.agent:agent",
        "Run an agent CLI contained: its own workspace, no authority, brokered egress.",
    ),
    "cache": (
        "gatekeeper.cli.cache:cache",
        "The scan-result cache: findings stored by content, so unchanged files are not rescanned.",
    ),
    "conductor": (
        "gatekeeper.cli.conductor:conductor",
        "The conductor: a read-only agent in tmux that routes tickets through typed tools.",
    ),
    "dispatch": (
        "gatekeeper.cli.dispatch:dispatch",
        "Deliver a leased ticket to a role's provider: the envelope first, then the run.",
    ),
    "doctor": (
        "gatekeeper.cli.doctor:doctor",
        "Readiness: a real sandbox probe, AppArmor status, key and chain.",
    ),
    "events": (
        "gatekeeper.cli.events:events",
        "Typed events: GitHub sync into deduplicated events, pending tickets and notifications.",
    ),
    "evidence": (
        "gatekeeper.cli.evidence:evidence",
        "Evidence: audit, show, log, blob, prove, export, attest, publish, verify, note, "
        "acknowledge, key, repair, cosign.",
    ),
    "goal": (
        "gatekeeper.cli.goal:goal",
        "Goals: an objective, when it is done, and the tickets that serve it.",
    ),
    "hook": (
        "gatekeeper.cli.hook:hook",
        "Agent hooks in Claude Code's and Codex's protocols: deny secrets and protected writes.",
    ),
    "hud": (
        "gatekeeper.cli.hud:hud",
        "A read-only view of verdicts, transfers, goals, tickets, workers and next actions.",
    ),
    "init": (
        "gatekeeper.cli.init:init",
        "Create the state root, signing key and evidence log for a repository.",
    ),
    "install": (
        "gatekeeper.cli.install:install",
        "Wire oms into Claude Code or Codex: MCP server, hooks and agent instructions.",
    ),
    "mcp": (
        "gatekeeper.cli.mcp:mcp",
        "Serve MCP over stdio for one repository (`oms mcp`), or print client snippets.",
    ),
    "policy": (
        "gatekeeper.cli.policy:policy",
        "The policy file: init (a starter oms.toml), check, show, trust (a new tip), signers.",
    ),
    "process-result": (
        "gatekeeper.cli.result:process_result",
        "The result gate: frozen plan from the base, sandboxed checks, both scanners, evidence.",
    ),
    "reconcile": (
        "gatekeeper.cli.reconcile:reconcile",
        "Recovery: a watchdog pass over dead panes, stalled work, expired leases; work.db rebuilt.",
    ),
    "release": ("gatekeeper.cli.release:release", "Release readiness of oms itself."),
    "role": (
        "gatekeeper.cli.role:role",
        "Roles from policy: provider:model, eligibility, authority; assign one to a run role.",
    ),
    "run": (
        "gatekeeper.cli.run:run",
        "Runs: plan, orchestrate, consult, summon, fanout, continue, loop, reconcile, abort.",
    ),
    "sandbox": ("gatekeeper.cli.sandbox:sandbox", "Run a command in the check sandbox."),
    "scan": (
        "gatekeeper.cli.scan:scan",
        "Secrets in the repository's files, PATHs, the staged change, commits or stdin (exit 3).",
    ),
    "schedule": (
        "gatekeeper.cli.schedule:schedule",
        "The one user-scoped schedule: GitHub sync every 60 s, the watchdog every 15 min.",
    ),
    "ticket": (
        "gatekeeper.cli.ticket:ticket",
        "Tickets: work items of a goal, leased, dispatched, verified, held for a human.",
    ),
    "toolchain": (
        "gatekeeper.cli.toolchain:toolchain",
        "Trusted toolchains: built from the base's lockfiles, bound read-only into checks.",
    ),
    "trace": (
        "gatekeeper.cli.trace:trace",
        "Local tracers: the whole ticket path on a fixture, offline and non-certifying.",
    ),
    "transfer": (
        "gatekeeper.cli.transfer:transfer",
        "The data boundary: preview, approve, release, show, list.",
    ),
    "trust": (
        "gatekeeper.cli.trust:trust",
        "Review of verdicts per role: closed UTC days only, built from evidence; grants nothing.",
    ),
    "verify": (
        "gatekeeper.cli.verify:verify",
        "The result gate decides; one fresh grade from another engine is recorded beside it.",
    ),
    "worker": (
        "gatekeeper.cli.worker:worker",
        "Workers: the receipt a dispatched worker files when it is done.",
    ),
}


# How `oms --help` groups the table: the gates first, orchestration one step behind them.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Gates", ("init", "doctor", "process-result", "scan", "transfer", "evidence", "policy",
               "toolchain", "cache")),
    ("Agents", ("agent", "sandbox", "hook", "install", "mcp")),
    ("Orchestration", ("role", "goal", "ticket", "run", "worker", "verify", "dispatch",
                       "conductor", "hud", "trust", "events", "reconcile", "schedule", "trace")),
    ("Other", ("release",)),
)  # fmt: skip
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("oms", "the repository's state and the next steps"),
    ("oms init && oms policy init", "a signing key, an evidence log, a starter oms.toml"),
    ("oms process-result --candidate BRANCH", "judge an agent's branch (never merges)"),
    ("oms transfer list", "what was asked to leave the machine, and its state"),
    ("oms install claude-code", "hooks and the MCP server for Claude Code"),
    ("oms agent run -- claude", "the agent contained: no keys, no host, brokered egress"),
)  # fmt: skip


def load(name: str) -> click.Command:
    """Import the module behind one table entry and return its command."""
    module, _, attr = COMMANDS[name][0].partition(":")
    cmd = getattr(importlib.import_module(module), attr)
    if not isinstance(cmd, click.Command):
        raise TypeError(f"{module}:{attr} is not a click command")
    return cmd


class LazyGroup(click.Group):
    """A group whose commands come from `COMMANDS`, imported only when one is resolved."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # From the table's help: listing must not import every command. A bare Command per
        # row gives each its whole first sentence, as `FullHelpGroup` does for the groups.
        for title, names in SECTIONS:
            rows = full_help_rows([(n, click.Command(n, help=COMMANDS[n][1])) for n in names])
            with formatter.section(title):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Examples"):
            formatter.write_dl(EXAMPLES)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="oh-my-super-agent", prog_name="oms")
def cli() -> None:
    """oms: a fail-closed gatekeeper for AI coding agents.

    Bare `oms` shows the repository's state and the next steps (`oms --json`: as JSON).
    Every command takes --json and prints exactly one JSON object."""


def _usage(args: Sequence[str], message: str) -> NoReturn:
    # Imported on this path only: gatekeeper.errors pulls in the foundations (start-up time).
    from gatekeeper.errors import EXIT_USAGE

    emit_error("--json" in args, EXIT_USAGE, "usage", message)
    sys.exit(EXIT_USAGE)


def _interrupted(args: Sequence[str]) -> NoReturn:
    """Ctrl-C (SIGINT) where no gate turned it into a recorded interruption: exit 130."""
    from gatekeeper.errors import Interrupted

    err = Interrupted("interrupted by Ctrl-C")
    emit_error("--json" in args, err.exit_code, err.kind, err.message)
    sys.exit(err.exit_code)


# -- inside an oms agent sandbox (gatekeeper/agent/inside.py) -----------------------------

# What still runs as usual inside: it answers about this process only.
INSIDE_LOCAL = frozenset({"doctor"})
NO_STATE_INSIDE = (
    "inside an oms agent sandbox there is no oms state to reach; oms mcp reaches the one outside"
)


def _inside_mcp(args: Sequence[str]) -> None:
    """`oms mcp [--repo DIR]` relays to the server outside (which serves the run's repository,
    so --repo is ignored); `oms mcp config` prints snippets; anything else is refused."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-h", "--help"):
            return
        if flag == "--repo" and rest:
            rest.pop(0)
        elif not flag.startswith("--repo="):
            _refuse_inside(args)
    if not rest:
        # Imported on this path only: aiohttp is for the relay, not for `oms --help`.
        from gatekeeper.agent.mcp_relay import relay_stdio

        sys.exit(relay_stdio(SOCKET))
    if rest[0] != "config":
        _refuse_inside(args)


def _refuse_inside(args: Sequence[str]) -> NoReturn:
    # Imported on this path only, as in `_usage`.
    from gatekeeper.errors import Unavailable

    err = Unavailable(NO_STATE_INSIDE)
    emit_error("--json" in args, err.exit_code, err.kind, err.message)
    sys.exit(err.exit_code)


def _inside_conductor(args: Sequence[str]) -> None:
    """`oms conductor bridge|wait-event` relay to the broker outside, which runs them for the
    run's own conductor session: `--repo` and `--session` given here are ignored (a run
    without a conductor binding has no such route: exit 4). Anything else is refused."""
    words = [a for a in args if not a.startswith("-")]
    helps = ("-h", "--help")
    if (len(args) == 1 and args[0] in helps) or (
        len(args) == 2 and args[0] in ("bridge", "wait-event") and args[1] in helps
    ):  # help only as itself: `--help` elsewhere (a flag's value) must not open a command
        return
    if not words or words[0] not in ("bridge", "wait-event"):
        _refuse_inside(args)
    rest = list(args[list(args).index(words[0]) + 1 :])
    while rest:  # only --repo DIR / --session ID (either form) may follow
        flag = rest.pop(0)
        if flag in ("--repo", "--session") and rest:
            rest.pop(0)
        elif not flag.startswith(("--repo=", "--session=")):
            _refuse_inside(args)
    # Imported on this path only: aiohttp is for the relay, not for `oms --help`.
    from gatekeeper.agent.mcp_relay import BRIDGE_PATH, relay_stdio, relay_wait

    sys.exit(relay_stdio(SOCKET, BRIDGE_PATH) if words[0] == "bridge" else relay_wait(SOCKET))


def _inside_hook(args: Sequence[str]) -> None:
    """`oms hook claude-code|codex EVENT` runs as usual (oms' own checks, with the built-in
    policy: gatekeeper/integrations/hooks/checks.py) and then asks the broker outside, which
    records the call with the run's identity and answers (cli/hook.py); where the run has
    no such route, the local answer stands."""


def _inside_worker(args: Sequence[str]) -> None:
    """`oms worker result` asks the broker outside to file the run's own receipt: the
    dispatch and its lease are the run's, outside (the agent never holds the lease), so
    `--dispatch`, `--lease`, `--nonce`, `--commit` and `--repo` given here are ignored.
    Anything else is refused."""
    words = [a for a in args if not a.startswith("-")]
    if list(args) in (["-h"], ["--help"]) or (words[:1] == ["result"] and "--help" in args):
        return
    if not words or words[0] != "result":
        _refuse_inside(args)
    # Imported on this path only, as the relays are.
    from gatekeeper.cli.inside_worker import worker_result_inside

    sys.exit(worker_result_inside("--json" in args, SOCKET))


# Commands that reach the broker outside, each given the arguments after its name.
INSIDE_BROKERED: Mapping[str, Callable[[Sequence[str]], None]] = {
    "mcp": _inside_mcp,
    "conductor": _inside_conductor,
    "hook": _inside_hook,
    "worker": _inside_worker,
}


def _inside(args: Sequence[str]) -> None:
    """Returns when click should run `args` as usual; otherwise relays or refuses (exit 4).
    The root group takes flags only, so the first word is the command."""
    words = [a for a in args if not a.startswith("-")]
    if not words or words[0] in INSIDE_LOCAL:
        return
    brokered = INSIDE_BROKERED.get(words[0])
    if brokered is None:
        _refuse_inside(args)
    brokered(args[list(args).index(words[0]) + 1 :])


# -- bare `oms`: the repository's state (gatekeeper/cli/overview.py) ----------------------


def overview_args(args: Sequence[str]) -> bool:
    """Only `--json` and `--repo DIR` (either form), no command: the overview's arguments."""
    rest = list(args)
    while rest:
        flag = rest.pop(0)
        if flag == "--repo" and rest:
            rest.pop(0)
        elif flag != "--json" and not flag.startswith("--repo="):
            return False
    return True


def _bare(args: list[str]) -> list[str]:
    """What bare `oms` runs. At a terminal with nothing else: the conductor when the base's
    policy defines its role, else the overview; in a pipe, the help (as git and cargo do),
    unless `--json` or `--repo` asks for the overview. The overview exits here."""
    terminal = not args and sys.stdin.isatty() and sys.stdout.isatty()
    if not args and not terminal:
        return args
    from gatekeeper.cli.overview import conductor_configured, overview

    if terminal and conductor_configured(Path(".")):
        return ["conductor", "start"]
    overview.main(args=args, prog_name="oms", standalone_mode=False)
    sys.exit(0)  # not reached: the overview exits with its own code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    inside = inside_agent_sandbox()  # one os.path.exists: `oms --help` stays fast
    if inside:
        _inside(args)
    try:
        if not inside and overview_args(args):
            args = _bare(list(args))
        cli.main(args=args, prog_name="oms", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        # Bare `oms` or `oms GROUP` asks what there is (as git and cargo answer): the help on
        # stdout, exit 0. click 8.2 makes it a usage error (exit 2, help on stderr).
        click.echo(exc.ctx.get_help())
        sys.exit(0)
    except click.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's answer to Ctrl-C
            _interrupted(args)
        _usage(args, "aborted")
    except click.ClickException as exc:
        _usage(args, exc.format_message())
    sys.exit(0)
