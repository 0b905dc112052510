"""What `oms agent run` hands the agent profile: the environment, the probe's list, limits.

The environment is built from scratch: a few fixed names, the policy's `env_allow`, and
what the agent kind needs (placeholders only). Nothing of oms' own environment (its keys,
`GIT_*`, `LD_*`, `SSH_AUTH_SOCK`) is copied unless the policy names it, and the profile
refuses secret-looking names whatever the policy says.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from evidence import state_root
from gatekeeper.agent import inside, logins
from gatekeeper.agent.kinds import KindSetup
from gatekeeper.agent.payloads import EgressMode
from gatekeeper.repo.git import Repo
from policy import AgentPolicy
from sandbox.agent import AgentLimits, AgentProfile, host_secret_paths

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Copied from oms' environment when set: how the terminal looks, nothing else.
TERMINAL_ENV = ("TERM", "COLORTERM", "LANG")


def agent_env(run_id: str, egress: EgressMode, kind: KindSetup, env_allow: Sequence[str],
              environ: Mapping[str, str]) -> dict[str, str]:  # fmt: skip
    # oms' shim first: `oms` inside is this very oms (see write_oms_shim).
    env = {
        "PATH": f"{inside.BIN}:{SYSTEM_PATH}",
        "HOME": inside.HOME,
        "USER": "agent",
        "LOGNAME": "agent",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "TMPDIR": inside.TMP,
        "OMS_AGENT_RUN_ID": run_id,
    }
    for name in (*TERMINAL_ENV, *env_allow):
        if name in environ:
            env[name] = environ[name]
    env.update(kind.env)
    if egress == "tunnel":
        proxy = f"http://127.0.0.1:{inside.TUNNEL_PORT}"
        env.update(HTTPS_PROXY=proxy, https_proxy=proxy)
    return env


def hidden_paths(repo: Repo, profile: AgentProfile, environ: Mapping[str, str]) -> list[str]:
    """What the probe must find absent inside: oms' state, the repository, the stored
    subscription logins, the user's secrets and sockets (a parent of a read-only bind
    excepted: bwrap makes it)."""
    wanted = [str(state_root()), str(repo.top), str(repo.common_dir),
              *logins.hidden(environ), *host_secret_paths(environ)]  # fmt: skip
    inside_binds = [p for _, p in profile.ro_paths]
    return sorted({
        w for w in wanted
        if not any(b == w or b.startswith(w.rstrip("/") + "/") for b in inside_binds)
    })  # fmt: skip


def limits_of(pol: AgentPolicy) -> AgentLimits:
    return AgentLimits(wall_s=pol.wall_s, memory_mb=pol.memory_mb, max_procs=pol.max_procs,
                       tmpfs_mb=pol.tmpfs_mb, output_bytes=pol.output_bytes)  # fmt: skip


def write_oms_shim(bin_dir: Path, argv: Sequence[str]) -> None:
    """`oms` inside: a shell script that runs `argv` (this oms' interpreter and source,
    oms' own paths only) with the caller's arguments. The agent cannot change it: it lies
    in the read-only /run/oms."""
    bin_dir.mkdir(mode=0o755)
    shim = bin_dir / "oms"
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
    os.chmod(shim, 0o755)  # noqa: S103 # nosec B103 -- the agent runs it, read-only


def write_marker(path: Path, run_id: str, worker: str | None = None,
                 unattended: bool = False) -> None:  # fmt: skip
    """The read-only marker that tells oms inside where it is (and that it has no state);
    a worker's run also names its worker, so that its hooks publish observations, and an
    unattended worker's says so, so that its PreToolUse hook answers `allow` (events.py)."""
    doc: dict[str, object] = {"run_id": run_id, "socket": inside.SOCKET,
                              "relay_port": inside.RELAY_PORT}  # fmt: skip
    if worker is not None:
        doc["worker"] = worker
        if unattended:
            doc["unattended"] = True
    path.write_text(json.dumps(doc) + "\n")
    os.chmod(path, 0o644)


def write_task_file(path: Path, document: bytes) -> None:
    """A document for the agent at `path` in the run's `oms/` dir (bound read-only at
    /run/oms: the task, an answer schema): written by oms outside, before the sandbox
    starts; the agent reads it and cannot change it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(document)
    os.chmod(path, 0o444)  # nosec B103 -- the agent reads it, read-only
