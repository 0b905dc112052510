"""Agent kinds: what `claude-code`, `codex` and `command` need inside the agent sandbox.

For the two real CLIs oms writes a per-run config dir under `run_dir/home/` (bound at
`/home/agent/<name>`), points them at the in-sandbox relay to oms' broker with a
placeholder key (the real key is injected outside, DESIGN.md "Egress"), turns off their
telemetry, auto-update and plugin lookups, and gives them one MCP server: `oms mcp`.

Under `--egress api` every kind, `command` included, gets the provider environment
(`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL` and a placeholder key) for each provider oms
holds a real key for, so that any agent or SDK reaches the broker (issue 29);
`require_keys` refuses such a run, before it starts, when its kind's provider has none.

The CLI is identified as data: cmd[0] must resolve to the `bin` entry of the npm package
(`@anthropic-ai/claude-code`, `@openai/codex`), whose version is read from its
package.json; the CLI is never run to ask. Its package dir is bound read-only.

Claude Code gets `--setting-sources user`, so the repository's own `.claude/` settings
and hooks never load, and `--strict-mcp-config`, so its `.mcp.json` does not either.
Codex gets `--strict-config`, so a config field it does not know stops it instead of
being ignored, and runs with `sandbox_mode = "danger-full-access"`: with user namespaces
disabled its own bwrap cannot start, and oms' sandbox is the boundary; that is recorded
in `agent_flags` for the run's evidence. /workspace is not marked trusted, so the
repository's own `.codex/config.toml` is not loaded.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import shutil
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from gatekeeper.agent.egress_config import KEY_ENV, PROVIDERS, Provider
from gatekeeper.agent.inside import BIN, HOME, WORKSPACE
from gatekeeper.errors import InternalError, Unavailable, UsageError

Kind = Literal["claude-code", "codex", "command"]
Egress = Literal["none", "api", "tunnel"]

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_PACKAGE = "@openai/codex"
PLACEHOLDER_PREFIX = "oms-placeholder-"
# How far above the executable its package.json may be (bin/claude.exe, bin/codex.js,
# vendor/<triple>/bin/codex in the platform package).
_PACKAGE_DEPTH = 4
_PACKAGE_JSON_MAX = 1 << 20
# Claude Code stays quiet with these (measured: zero DNS lookups, no update checks).
CLAUDE_QUIET = (
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL", "1"),
)
# Flags oms sets for Claude Code; a second copy in CMD would make the outcome depend on
# the CLI's parser, so it is refused.
CLAUDE_OWN_FLAGS = ("--setting-sources", "--mcp-config", "--strict-mcp-config")
# Permission modes that Claude Code refuses as root unless told it is in a sandbox.
CLAUDE_BYPASS = ("--dangerously-skip-permissions", "--permission-mode=bypassPermissions")
# Codex stops on a config.toml field it does not know, instead of ignoring it: a renamed
# switch in a newer Codex cannot quietly turn analytics or retries back on.
# Hook trust bypassed: the hooks it loads are oms' own, run in the agent's own sandbox.
CODEX_OWN_FLAGS = ("--strict-config", "--dangerously-bypass-hook-trust")
# `oms hook …` inside (docs/hooks.md): scanners only; Stop allows at once.
INSIDE_OMS = (f"{BIN}/oms",)
INSIDE_STOP_TIMEOUT_S = 60
CODEX_TRIPLES = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
# The sandbox's own /tmp: a private capped tmpfs, not the host's.
INSIDE_TMP = "/tmp"  # noqa: S108 # nosec B108
CODEX_PLATFORM = {"x86_64": "codex-linux-x64", "aarch64": "codex-linux-arm64"}


@dataclass(frozen=True)
class KindSetup:
    """What one agent kind needs inside the sandbox (see the module docstring)."""

    argv: tuple[str, ...]  # CMD with the kind's flags inserted
    env: tuple[tuple[str, str], ...]  # placeholders only, never a real key
    placeholders: frozenset[str]  # env names whose values are placeholders
    home_dirs: tuple[str, ...]  # dirs made under run_dir/home/, bound at /home/agent/<name>
    ro_paths: tuple[str, ...]  # the CLI's own install dirs, bound read-only
    cli_version: str | None  # from the CLI's package.json, never by running it
    agent_flags: tuple[str, ...]  # what weakens the CLI's own sandbox, for the evidence


@dataclass(frozen=True)
class _Package:
    root: Path  # the package dir, symlinks resolved
    exe: Path  # the executable cmd[0] resolved to
    version: str | None


def prepare_kind(
    kind: Kind,
    cmd: Sequence[str],
    *,
    run_dir: Path,
    egress: Egress,
    relay_url: str,
    oms_mcp_argv: Sequence[str],
    search_path: str,
    held: Collection[Provider] = (),
) -> KindSetup:
    """The argv, env, config dirs and read-only paths for `kind` running `cmd`; `held`
    names the providers oms holds a real key for (their environment under `api`).

    Raises UsageError for an empty cmd, a cmd[0] that does not resolve on `search_path`,
    or, for claude-code and codex, one that is not that CLI's npm package.
    """
    if not cmd:
        raise UsageError("no command to run: give it after `--`")
    if kind == "command":
        return _with_providers(_command(cmd, search_path), egress, relay_url, held)
    if not oms_mcp_argv:
        raise UsageError("the in-sandbox `oms mcp` command is empty")
    home = run_dir / "home"
    home.mkdir(parents=True, exist_ok=True)
    if kind == "claude-code":
        setup = _claude(cmd, home, egress, relay_url, oms_mcp_argv, search_path)
    elif kind == "codex":
        setup = _codex(cmd, home, egress, relay_url, oms_mcp_argv, search_path)
    else:
        raise UsageError(f"unknown agent kind {kind!r}: use claude-code, codex or command")
    return _with_providers(setup, egress, relay_url, held)


KIND_PROVIDER: Mapping[Kind, Provider | None] = {
    "claude-code": "anthropic",
    "codex": "openai",
    "command": None,  # any provider oms holds a key for
}


def require_keys(kind: Kind, egress: Egress, held: Collection[Provider]) -> None:
    """`--egress api` needs a real key for the kind's provider (for `command`, any key):
    Unavailable, naming the remedy, before anything starts."""
    if egress != "api":
        return
    own = KIND_PROVIDER[kind]
    wanted = PROVIDERS if own is None else (own,)
    if any(p in held for p in wanted):
        return
    envs = " or ".join(KEY_ENV[p] for p in wanted)
    files = " or ".join(f"$OMS_HOME/providers/{p}" for p in wanted)
    raise Unavailable(f"--egress api needs a provider API key oms holds: set {envs} in oms' "
                      f"own environment or write it to {files} (one line, chmod 600); "
                      "with a subscription login instead, use --egress tunnel")  # fmt: skip


def provider_env(provider: Provider, relay_url: str) -> tuple[tuple[str, str], ...]:
    """The base URL that leads to the broker, and a placeholder for the key."""
    base = relay_url if provider == "anthropic" else relay_url + "/v1"
    prefix = "ANTHROPIC" if provider == "anthropic" else "OPENAI"
    return ((f"{prefix}_BASE_URL", base), (KEY_ENV[provider], placeholder_key(KEY_ENV[provider])))


def _with_providers(
    setup: KindSetup, egress: Egress, relay_url: str, held: Collection[Provider]
) -> KindSetup:
    """`setup` with the provider environment of each held provider it lacks, under `api`."""
    if egress != "api":
        return setup
    names = {k for k, _ in setup.env}
    extra = [kv for p in PROVIDERS if p in held for kv in provider_env(p, relay_url)
             if kv[0] not in names]  # fmt: skip
    keys = {k for k, _ in extra if k in KEY_ENV.values()}
    return replace(setup, env=(*setup.env, *extra), placeholders=setup.placeholders | keys)


def placeholder_key(name: str) -> str:
    """The stand-in for the provider key in `name`: recognisable, useless anywhere, and
    the one value the agent profile lets a secret-looking name have
    (`sandbox.agent.placeholder`, the same rule)."""
    return PLACEHOLDER_PREFIX + name.lower().replace("_", "-")


# -- command ------------------------------------------------------------------------------


def _command(cmd: Sequence[str], search_path: str) -> KindSetup:
    # A path (with a slash) may name a file inside the sandbox, such as a workspace
    # script; a bare name must resolve on the host PATH, as the toolchain does.
    if "/" not in cmd[0] and shutil.which(cmd[0], path=search_path) is None:
        raise UsageError(f"command not found on PATH: {cmd[0]}")
    return KindSetup(tuple(cmd), (), frozenset(), (), (), None, ())


# -- finding the CLI as data --------------------------------------------------------------


def _resolve(cmd0: str, search_path: str, what: str) -> Path:
    if "/" in cmd0:
        if not os.path.isabs(cmd0):
            raise UsageError(f"give {what} as an absolute path or a bare name: {cmd0}")
        found: str | None = cmd0 if os.path.isfile(cmd0) and os.access(cmd0, os.X_OK) else None
    else:
        found = shutil.which(cmd0, path=search_path)
    if found is None:
        raise UsageError(f"{what} not found: {cmd0} (install it with npm: docs/install.md)")
    return Path(found).resolve()


def _read_package_json(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            data = json.loads(f.read(_PACKAGE_JSON_MAX))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _bin_targets(root: Path, meta: Mapping[str, Any]) -> set[Path]:
    bins = meta.get("bin")
    if isinstance(bins, str):
        bins = {"_": bins}
    if not isinstance(bins, dict):
        return set()
    return {(root / v).resolve() for v in bins.values() if isinstance(v, str)}


def _find_package(exe: Path, name: str, accept: Path | None = None) -> _Package | None:
    """The npm package `name` whose `bin` is `exe` (or whose dir holds `exe` at `accept`,
    relative), looking at most a few dirs up; None if `exe` is not that package's."""
    for root in list(exe.parents)[:_PACKAGE_DEPTH]:
        meta = _read_package_json(root / "package.json")
        if meta is None:
            continue
        if meta.get("name") != name:
            return None
        own = exe in _bin_targets(root, meta) or (accept is not None and exe == root / accept)
        version = meta.get("version")
        return _Package(root, exe, version if isinstance(version, str) else None) if own else None
    return None


def _cli(cmd0: str, search_path: str, name: str, accept: Path | None = None) -> _Package:
    exe = _resolve(cmd0, search_path, name)
    pkg = _find_package(exe, name, accept)
    if pkg is None:
        raise UsageError(f"{cmd0} is not the {name} CLI installed by npm (docs/install.md)")
    return pkg


def installed_cli(kind: Kind, cmd0: str, search_path: str) -> str | None:
    """The version of the real CLI `cmd0` resolves to, found as `prepare_kind` finds it
    (never by running it); UsageError when it is not installed or not that npm package."""
    if kind == "claude-code":
        return _cli(cmd0, search_path, CLAUDE_PACKAGE).version
    if kind == "codex":
        return _codex_package(cmd0, search_path)[0].version
    raise UsageError(f"{kind} is not an npm-installed agent CLI")


# -- claude-code --------------------------------------------------------------------------


def _claude(
    cmd: Sequence[str],
    home: Path,
    egress: Egress,
    relay_url: str,
    oms_mcp_argv: Sequence[str],
    search_path: str,
) -> KindSetup:
    _refuse_own_flags(cmd[1:], CLAUDE_OWN_FLAGS, "Claude Code")
    pkg = _cli(cmd[0], search_path, CLAUDE_PACKAGE)
    key = placeholder_key("ANTHROPIC_API_KEY")
    conf = _fresh_dir(home / ".claude")
    inside = f"{HOME}/.claude"
    _write_json(conf / ".claude.json", _claude_state(key))
    # Imported here: the hooks package (gates, scanners) is for a run's setup, not for every
    # caller of this module (`oms run list` resolves kinds through work.roles).
    from gatekeeper.integrations.hooks.config import claude_hooks

    hooks = claude_hooks(INSIDE_OMS, INSIDE_STOP_TIMEOUT_S)
    _write_json(conf / "settings.json", {"env": dict(CLAUDE_QUIET), "hooks": hooks})
    _write_json(conf / "oms-mcp.json", {"mcpServers": {"oms": _mcp_entry(oms_mcp_argv)}})
    # --setting-sources ends --mcp-config's list of files (it takes several).
    flags = ("--strict-mcp-config", "--mcp-config", f"{inside}/oms-mcp.json",
             "--setting-sources", "user")  # fmt: skip
    env: list[tuple[str, str]] = [
        ("CLAUDE_CONFIG_DIR", inside),
        *CLAUDE_QUIET,
        ("TMPDIR", INSIDE_TMP),
    ]
    placeholders: frozenset[str] = frozenset()
    if egress != "tunnel":  # a tunnel is for a subscription login: no base URL, no key
        env += provider_env("anthropic", relay_url)
        placeholders = frozenset({"ANTHROPIC_API_KEY"})
    agent_flags: tuple[str, ...] = ()
    if _claude_bypass(cmd[1:]):
        # Claude Code refuses to skip permissions as root unless told it is sandboxed,
        # which under oms it is; only then is IS_SANDBOX set, and recorded.
        env.append(("IS_SANDBOX", "1"))
        agent_flags = ("IS_SANDBOX=1",)
    return KindSetup(
        argv=(str(pkg.exe), *flags, *cmd[1:]),
        env=tuple(env),
        placeholders=placeholders,
        home_dirs=(".claude",),
        ro_paths=(str(pkg.root),),
        cli_version=pkg.version,
        agent_flags=agent_flags,
    )


def _refuse_own_flags(args: Sequence[str], own: Sequence[str], cli: str) -> None:
    for arg in args:
        if arg.split("=", 1)[0] in own:
            raise UsageError(f"oms sets {arg.split('=', 1)[0]} for {cli} itself: drop it")


def _claude_bypass(args: Sequence[str]) -> bool:
    return any(
        a in CLAUDE_BYPASS or (a == "--permission-mode" and b == "bypassPermissions")
        for a, b in itertools.pairwise([*args, ""])
    )


def _claude_state(key: str) -> dict[str, Any]:
    """`.claude.json` past onboarding, the folder-trust and the custom-key prompts."""
    return {
        "hasCompletedOnboarding": True,
        "autoUpdates": False,
        "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
        "projects": {WORKSPACE: {"hasTrustDialogAccepted": True}},
    }


def _fresh_dir(path: Path) -> Path:
    """The per-run config dir, new: a run never inherits another's config."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        raise InternalError(f"the run's config dir already exists: {path}") from None
    return path


def _mcp_entry(argv: Sequence[str]) -> dict[str, Any]:
    return {"type": "stdio", "command": argv[0], "args": list(argv[1:])}


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


# -- codex --------------------------------------------------------------------------------


def _codex_package(cmd0: str, search_path: str) -> tuple[_Package, Path]:
    """The @openai/codex package and its native binary, for this machine's platform."""
    machine = platform.machine()
    if machine not in CODEX_TRIPLES:
        raise UsageError(f"no Codex binary for this machine ({machine})")
    native = Path("vendor", CODEX_TRIPLES[machine], "bin", "codex")
    pkg = _cli(cmd0, search_path, CODEX_PACKAGE, accept=native)
    if pkg.exe == pkg.root / native:  # the platform package's binary itself
        return pkg, pkg.root
    scope = pkg.root.parent  # .../node_modules/@openai
    for plat in (pkg.root / "node_modules/@openai" / CODEX_PLATFORM[machine],
                 scope / CODEX_PLATFORM[machine]):  # fmt: skip
        if (plat / native).is_file():
            return pkg, plat.resolve()
    raise UsageError(f"Codex's platform package {CODEX_PLATFORM[machine]} is not installed")


def _codex(
    cmd: Sequence[str],
    home: Path,
    egress: Egress,
    relay_url: str,
    oms_mcp_argv: Sequence[str],
    search_path: str,
) -> KindSetup:
    _refuse_own_flags(cmd[1:], CODEX_OWN_FLAGS, "Codex")
    pkg, plat = _codex_package(cmd[0], search_path)
    native = plat / "vendor" / CODEX_TRIPLES[platform.machine()] / "bin" / "codex"
    conf = _fresh_dir(home / ".codex")
    text = codex_config(egress, relay_url, oms_mcp_argv)
    fd = os.open(conf / "config.toml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    # The native binary directly, with the two variables its Node wrapper would set:
    # the sandbox then needs no Node.
    env: list[tuple[str, str]] = [
        ("CODEX_HOME", f"{HOME}/.codex"),
        ("TMPDIR", INSIDE_TMP),  # never a parent of CODEX_HOME, or its helpers fail
        ("CODEX_MANAGED_BY_NPM", "1"),
        ("CODEX_MANAGED_PACKAGE_ROOT", str(pkg.root)),
    ]
    placeholders: frozenset[str] = frozenset()
    if egress != "tunnel":
        env += provider_env("openai", relay_url)
        placeholders = frozenset({"OPENAI_API_KEY"})
    return KindSetup(
        argv=(str(native), *CODEX_OWN_FLAGS, *cmd[1:]),
        env=tuple(env),
        placeholders=placeholders,
        home_dirs=(".codex",),
        ro_paths=tuple(dict.fromkeys((str(pkg.root), str(plat)))),
        cli_version=pkg.version,
        agent_flags=("sandbox_mode=danger-full-access", "hook_trust=bypassed"),
    )


def codex_config(egress: Egress, relay_url: str, oms_mcp_argv: Sequence[str]) -> str:
    """Codex's config.toml: the relay as its one provider (not with a tunnel, which is
    for a subscription login), no retries (a retried stream re-runs the tool), no
    analytics, plugins, update checks or feedback, `oms mcp` as its MCP server."""
    lines = [
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
    ]
    if egress != "tunnel":
        lines += [
            'model_provider = "oms"',
            "",
            "[model_providers.oms]",
            'name = "oms"',
            f"base_url = {_toml_str(relay_url + '/v1')}",
            'wire_api = "responses"',
            'env_key = "OPENAI_API_KEY"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "supports_websockets = false",
        ]
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false"]
    lines += ["", "[features]", "plugins = false", "", "[mcp_servers.oms]"]
    lines.append(f"command = {_toml_str(oms_mcp_argv[0])}")
    lines.append("args = [" + ", ".join(_toml_str(a) for a in oms_mcp_argv[1:]) + "]")
    import tomlkit  # as claude_hooks above: for a run's setup only

    from gatekeeper.integrations.hooks.config import codex_hooks

    hooks = codex_hooks(INSIDE_OMS, INSIDE_STOP_TIMEOUT_S)
    text = "\n".join(lines) + "\n\n" + tomlkit.dumps({"hooks": hooks})
    parsed = tomllib.loads(text)  # what codex will read is what was meant
    if parsed["mcp_servers"]["oms"] != {"command": oms_mcp_argv[0], "args": [*oms_mcp_argv[1:]]}:
        raise UsageError("the in-sandbox `oms mcp` command cannot be written as TOML")
    if parsed["hooks"] != hooks:
        raise InternalError("the in-sandbox hooks cannot be written as TOML")
    return text


def _toml_str(value: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    out = []
    for ch in value:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise UsageError("the in-sandbox `oms mcp` command is not valid text")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
