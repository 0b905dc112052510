"""Start-up: each command imports what it uses, and not the layers it merely sits beside.

`oms --help` is pinned in test_lazy.py. Here, first, every command of the click tree: each
top-level command is resolved in a fresh process (its module imported, each subcommand
looked up as click does before running it), and which of the WATCHED heavy modules are then
loaded must be within that command's pin in RESOLVED; a command added to the table without
a pin fails. Then the commands a user waits for (issue 33): each runs for real in a
subprocess (a real git repository after a real `oms init`), and what `sys.modules` holds
when it has answered is compared with two lists: modules the command must have loaded
(proof that it ran its own path, not an early refusal) and modules it must not have
loaded. The second list names concrete modules, so an import added at the top of a module
on the path (the MCP SDK, aiohttp, the run engine, a gate it does not run) fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.oms import parse_single_json

from gatekeeper.cli.main import COMMANDS

# Fresh interpreters, one per case: in `make test`, not in the quick loop of `make test-fast`.
pytestmark = pytest.mark.startup

RunOms = Callable[..., subprocess.CompletedProcess[str]]

# Runs one command in-process as the console script does, then lists what was imported.
RUNNER = (
    "import json, sys\n"
    "from gatekeeper.cli.main import main\n"
    "try:\n"
    "    main(json.loads(sys.argv[1]))\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "with open(sys.argv[2], 'w') as f:\n"
    "    json.dump(sorted(sys.modules), f)\n"
    "sys.exit(code)\n"
)

# What none of these commands serves, relays or brokers: the MCP SDK and server, the
# egress broker's HTTP stack, `oms agent run` itself.
NOT_SERVING = ("mcp", "gatekeeper.mcp.server", "aiohttp", "uvicorn", "starlette",
               "gatekeeper.agent.run", "gatekeeper.agent.egress")  # fmt: skip


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    uses: tuple[str, ...]  # loaded: the command ran its own path
    never: tuple[str, ...]
    stdin: str = ""
    again: bool = False  # measured on a second run (what the first one cached is there)


def _hook_input(repo: Path, kind: str) -> str:
    tool, tool_input = {
        "HOOK": ("Bash", {"command": "ls -la"}),
        "HOOK_WRITE": ("Write", {"file_path": str(repo / "a.py"), "content": "x = 1\n"}),
    }[kind]
    return json.dumps({"hook_event_name": "PreToolUse", "cwd": str(repo), "tool_name": tool,
                       "tool_input": tool_input})  # fmt: skip


# The renderers `--format` loads: only the one asked for (text and JSON print as before).
RENDERERS = ("gatekeeper.integrations.formats.sarif", "gatekeeper.integrations.formats.junit",
             "gatekeeper.integrations.formats.markdown", "xml.etree.ElementTree")  # fmt: skip


# What a tool call's hook never needs: the result gate and the records beside it, the mark's
# evidence reading and signatures, the sandbox, the AST parsers, detect-secrets' plugins.
HOOK_NEVER = ("gatekeeper.gates.result.pipeline", "gatekeeper.gates.result.verdict",
              "gatekeeper.gates.records", "gatekeeper.gates.mark", "gatekeeper.repo.policy",
              "sandbox.bwrap", "sandbox.probe", "sandbox.runner", "cryptography",
              "tree_sitter", "detect_secrets", "httpx")  # fmt: skip


CASES = {
    "run list": Case(
        ("run", "list", "--json"),
        # A list reads work.db: no fence, no key, no trusted policy, no pydantic model. The
        # first work command makes work.db (`oms init` does not): measured on the second.
        uses=("gatekeeper.work.runs.listing", "gatekeeper.work.db"),
        never=(*NOT_SERVING, "gatekeeper.work.fence", "gatekeeper.work.runs.api",
               "gatekeeper.work.payloads", "policy.model", "evidence.store", "pydantic",
               "cryptography", "gatekeeper.work.runs.engine", "gatekeeper.work.runs.gates",
               "gatekeeper.work.providers.claude_code", "gatekeeper.integrations.hooks",
               "gatekeeper.gates.transfer", "gatekeeper.gates.result", "gatekeeper.scan",
               "gatekeeper.gates.toolchain.build", "detect_secrets", "tree_sitter", "httpx",
               "tomlkit"),
        again=True,
    ),
    "mcp config": Case(
        ("mcp", "config", "--json"),
        uses=("gatekeeper.integrations.install.entries", "gatekeeper.gates.mark"),
        never=(*NOT_SERVING, "anyio", "gatekeeper.mcp.tools", "gatekeeper.work",
               "gatekeeper.integrations.hooks", "gatekeeper.gates.toolchain.build",
               "gatekeeper.gates.result", "gatekeeper.scan", "detect_secrets", "tree_sitter",
               "httpx"),
    ),
    "hook claude-code PreToolUse (a benign Bash command)": Case(
        ("hook", "claude-code", "PreToolUse"),
        uses=("gatekeeper.integrations.hooks.checks",),
        never=(*NOT_SERVING, *HOOK_NEVER, "gatekeeper.mcp", "gatekeeper.work",
               "gatekeeper.gates.transfer", "gatekeeper.integrations.install",
               "gatekeeper.integrations.hooks.observe", "gatekeeper.scan.policy", "pydantic",
               "policy.model"),
        stdin="HOOK",
    ),
    "hook claude-code PreToolUse (a benign Write, both caches warm)": Case(
        ("hook", "claude-code", "PreToolUse"),
        uses=("gatekeeper.integrations.hooks.policy_cache", "gatekeeper.scan.cache"),
        never=(*NOT_SERVING, *HOOK_NEVER, "gatekeeper.mcp", "gatekeeper.work",
               "gatekeeper.gates.transfer", "gatekeeper.integrations.install",
               "gatekeeper.integrations.hooks.observe", "pydantic", "policy.model"),
        stdin="HOOK_WRITE",
        again=True,
    ),
    "evidence verify --commit": Case(
        ("evidence", "verify", "--commit", "HEAD", "--json"),
        uses=("gatekeeper.work.provenance_verify",),
        never=(*NOT_SERVING, "gatekeeper.mcp", "gatekeeper.work.db", "gatekeeper.work.fence",
               "gatekeeper.scan", "gatekeeper.gates.result", "gatekeeper.gates.transfer",
               "gatekeeper.integrations", "sandbox.bwrap", "detect_secrets", "tree_sitter",
               "httpx", "sqlite3"),
    ),
    "scan --stdin": Case(
        # Both scanners and the policy model; of the evidence package only the state
        # directories the scan-result cache lives under (evidence.state, its errors).
        ("scan", "--stdin", "--json"),
        uses=("gatekeeper.gates.secrets", "gatekeeper.scan.gitleaks",
              "gatekeeper.scan.detect_secrets", "policy.model"),
        never=(*NOT_SERVING, "gatekeeper.mcp", "gatekeeper.work", "evidence.store",
               "evidence.log", "evidence.keys", "evidence.export", "evidence.blobs",
               "evidence.checkpoint", "evidence.dsse", "evidence.cosign", "evidence.audit",
               "evidence.entry", "evidence.verify", "cryptography", "gatekeeper.gates.result",
               "gatekeeper.gates.transfer", "gatekeeper.integrations.hooks", "tree_sitter",
               "httpx", *RENDERERS),
        stdin="nothing secret here\n",
    ),
    "scan --stdin --format sarif --output FILE": Case(
        # The renderer asked for, and no other.
        ("scan", "--stdin", "--format", "sarif", "--output", "oms.sarif", "--json"),
        uses=("gatekeeper.gates.secrets", "gatekeeper.integrations.formats.sarif"),
        never=(*NOT_SERVING, "gatekeeper.integrations.formats.junit",
               "gatekeeper.integrations.formats.markdown", "xml.etree.ElementTree"),
        stdin="nothing secret here\n",
    ),
    "agent run --egress none": Case(
        # A contained `true`: the sandbox, the clone and the log, but no broker stack (the
        # broker starts on its first connection, and `true` makes none) and no tunnel.
        ("agent", "run", "--egress", "none", "--json", "--", "true"),
        uses=("gatekeeper.agent.run", "gatekeeper.agent.broker_socket", "sandbox.agent_runner",
              "sandbox.agent_probe"),
        never=("aiohttp", "multidict", "yarl", "h11", "mcp", "gatekeeper.mcp",
               "gatekeeper.agent.egress", "gatekeeper.agent.egress_http",
               "gatekeeper.agent.egress_scan", "gatekeeper.agent.mcp_relay",
               "gatekeeper.agent.observe", "gatekeeper.agent.worker_route",
               "gatekeeper.agent.tunnel", "gatekeeper.work.providers.claude_code",
               "gatekeeper.integrations.hooks", "detect_secrets", "tree_sitter", "httpx"),
    ),
    "agent run --help": Case(
        ("agent", "run", "--help"),
        uses=("gatekeeper.cli.agent",),
        never=("aiohttp", "gatekeeper.agent.egress", "gatekeeper.agent.tunnel", "evidence.store",
               "sandbox.agent_runner"),
    ),
    "doctor": Case(
        # It probes the sandbox, checks the scanners and digests the MCP tools (the SDK and
        # the tool modules are its own work), but runs no agent and no provider.
        ("doctor", "--json"),
        uses=("gatekeeper.gates.doctor", "sandbox.probe", "gatekeeper.mcp.server"),
        never=("aiohttp", "gatekeeper.agent.run", "gatekeeper.agent.egress",
               "gatekeeper.work.providers.claude_code", "gatekeeper.integrations.hooks",
               "gatekeeper.work.github", "gatekeeper.gates.result.pipeline", "tree_sitter",
               "detect_secrets", "httpx"),
    ),
    "doctor, a second time": Case(
        # The tools digest comes from the cache the first run filled: no SDK, no tool module.
        ("doctor", "--json"),
        uses=("gatekeeper.gates.doctor", "sandbox.probe", "gatekeeper.mcp.digest_cache"),
        never=(*NOT_SERVING, "mcp_types", "gatekeeper.mcp.tools", "anyio",
               "gatekeeper.work.providers.claude_code", "gatekeeper.integrations.hooks",
               "gatekeeper.work.github", "gatekeeper.gates.result.pipeline", "tree_sitter",
               "detect_secrets", "httpx"),
        again=True,
    ),
}  # fmt: skip


# The heavy modules (a module or a package with its submodules) a command's pin speaks of:
# SDKs and stores a command pays for at start-up only if it is built on them.
WATCHED = ("mcp", "mcp_types", "anyio", "aiohttp", "uvicorn", "starlette", "httpx",
           "detect_secrets", "tree_sitter", "cryptography", "pydantic", "tomlkit", "sqlite3",
           "rich", "gatekeeper.agent.run", "gatekeeper.agent.egress", "gatekeeper.mcp.server",
           "gatekeeper.mcp.tools", "gatekeeper.work", "gatekeeper.work.fence",
           "gatekeeper.work.runs.engine", "gatekeeper.gates.result", "gatekeeper.gates.transfer",
           "gatekeeper.scan", "gatekeeper.integrations.hooks", "gatekeeper.gates.toolchain.build",
           "gatekeeper.gates.doctor", "sandbox.probe", "evidence.store",
           "policy.model")  # fmt: skip
# What a command's module (and the modules it imports at its top) may load of WATCHED when
# the command is resolved, before it runs; the rest of WATCHED it must not. A command that
# imports its gate in its body has an empty pin.
_WORK = ("cryptography", "pydantic", "sqlite3", "gatekeeper.work", "gatekeeper.work.fence",
         "evidence.store", "policy.model")  # fmt: skip
_RESULT = ("cryptography", "pydantic", "gatekeeper.gates.result", "gatekeeper.scan",
           "gatekeeper.gates.toolchain.build", "sandbox.probe", "evidence.store",
           "policy.model")  # fmt: skip
RESOLVED: dict[str, tuple[str, ...]] = {
    "cache": ("sqlite3", "gatekeeper.scan"),
    "conductor": _WORK,
    "dispatch": (*_WORK, "gatekeeper.gates.transfer"),
    "doctor": (*_WORK, *_RESULT, "tomlkit", "gatekeeper.gates.doctor"),
    "events": (),
    "evidence": (),
    "goal": _WORK,
    "hud": (),
    "init": _RESULT,
    "install": ("cryptography", "pydantic", "tomlkit", "evidence.store", "policy.model"),
    "mcp": ("cryptography", "pydantic", "tomlkit", "evidence.store", "policy.model"),
    "policy": (*_RESULT, "tomlkit", "gatekeeper.gates.transfer"),
    "process-result": (*_WORK[:3], *_RESULT, "tree_sitter", "tomlkit", "gatekeeper.work",
                       "gatekeeper.gates.transfer"),
    # The watchdog restarts dead agent runs and folds work: it sits on most of oms.
    "reconcile": (*_WORK, *_RESULT, "aiohttp", "gatekeeper.agent.run", "gatekeeper.agent.egress",
                  "gatekeeper.gates.transfer", "gatekeeper.gates.doctor"),
    "release": (),
    "role": (*_WORK, *_RESULT),
    "run": (),
    "sandbox": ("pydantic", "sandbox.probe", "policy.model"),
    "schedule": (),
    "ticket": _WORK,
    "toolchain": ("cryptography", "pydantic", "gatekeeper.gates.toolchain.build", "sandbox.probe",
                  "evidence.store", "policy.model"),
    "trace": (),
    "transfer": ("cryptography", "pydantic", "sqlite3", "gatekeeper.gates.transfer",
                 "gatekeeper.scan", "evidence.store", "policy.model"),
    "trust": (*_WORK, *_RESULT, "gatekeeper.gates.doctor"),
    # The grade runs another engine under `oms agent run`.
    "verify": (*_WORK, *_RESULT, "aiohttp", "tree_sitter", "gatekeeper.agent.run",
               "gatekeeper.agent.egress", "gatekeeper.gates.transfer"),
    "worker": (*_WORK, "gatekeeper.gates.transfer"),
}  # fmt: skip
# Pinned by the parts of issue 33 that own them (the hooks, `oms agent run`, the scan), with
# their real runs below; kept out of RESOLVED so each is pinned once, by its owner.
PINNED_BY_THEIR_OWNERS = frozenset({"hook", "agent", "scan"})

# Resolves one top-level command and every subcommand under it, as click does before it
# runs one, then lists what was imported.
RESOLVER = (
    "import json, sys\n"
    "import click\n"
    "from gatekeeper.cli.main import load\n"
    "def walk(cmd, path):\n"
    "    found = [path]\n"
    "    if isinstance(cmd, click.Group):\n"
    "        ctx = click.Context(cmd)\n"
    "        for sub in cmd.list_commands(ctx):\n"
    "            found += walk(cmd.get_command(ctx, sub), f'{path} {sub}')\n"
    "    return found\n"
    "paths = walk(load(sys.argv[1]), sys.argv[1])\n"
    "print(json.dumps({'paths': paths, 'modules': sorted(sys.modules)}))\n"
)


def test_every_command_in_the_click_tree_has_an_import_pin() -> None:
    assert not set(RESOLVED) & PINNED_BY_THEIR_OWNERS
    assert sorted(set(RESOLVED) | PINNED_BY_THEIR_OWNERS) == sorted(COMMANDS)
    for name, allowed in RESOLVED.items():
        assert set(allowed) <= set(WATCHED), name


@pytest.mark.parametrize("name", sorted(RESOLVED))
def test_resolving_a_command_loads_only_its_pinned_heavy_modules(name: str) -> None:
    proc = subprocess.run([sys.executable, "-P", "-c", RESOLVER, name], capture_output=True,
                          text=True, check=True, timeout=120)  # fmt: skip
    got = json.loads(proc.stdout)
    assert got["paths"][0] == name and all(p.startswith(name) for p in got["paths"])
    unpinned = [m for m in _loaded(got["modules"], WATCHED) if m not in RESOLVED[name]]
    assert unpinned == [], f"`oms {name}` now loads {unpinned} before it runs"


def _loaded(names: list[str], wanted: tuple[str, ...]) -> list[str]:
    """Which of `wanted` (a module or a package: any of its submodules counts) are loaded."""
    return [w for w in wanted if any(n == w or n.startswith(w + ".") for n in names)]


@pytest.fixture
def initialised(git_repo: Path, run_oms: RunOms) -> Path:
    proc = run_oms(["init", "--json"], cwd=git_repo)
    assert parse_single_json(proc)["ok"], proc.stderr
    return git_repo


@pytest.mark.parametrize("name", sorted(CASES))
def test_command_imports_only_what_it_uses(
    name: str, initialised: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    case = CASES[name]
    out = tmp_path / "modules.json"
    stdin = _hook_input(initialised, case.stdin) if case.stdin.startswith("HOOK") else case.stdin
    for _ in range(2 if case.again else 1):
        proc = subprocess.run(
            [sys.executable, "-P", "-c", RUNNER, json.dumps(case.argv), str(out)],
            cwd=initialised, env=oms_env, input=stdin, capture_output=True, text=True,
            check=False, timeout=180,
        )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    if "--json" in case.argv:
        parse_single_json(proc)  # the command answered, in its one-object contract
    elif "--help" in case.argv:
        assert proc.returncode == 0 and proc.stdout.startswith("Usage: "), proc.stderr
    else:
        assert proc.returncode == 0 and proc.stdout == "", (proc.stdout, proc.stderr)
    names: list[str] = json.loads(out.read_text())
    assert _loaded(names, case.uses) == list(case.uses)
    assert _loaded(names, case.never) == []
