"""Building one toolchain from the base's lockfile, outside the sandbox.

What a toolchain is built from (`inputs_of`), with what (`runtime_of`: the runtime found
and asked its version in isolated mode, with a minimal environment), where its programs
end up (`layout_of`) and the build itself (`build`, dispatching to `kinds`). Every refusal
is ToolchainUnavailable naming the toolchain.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gatekeeper.repo.git import Repo
from policy import LoadedPolicy, Toolchain

from . import kinds
from .command import build_command
from .tools import PROBE_TIMEOUT_S, run_tool
from .tree import ToolchainUnavailable

# The probe sees no host environment: no PYTHONPATH, no PYTHONHOME, no user site.
PROBE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
_PY_PROBE = (
    "import os, platform, sys; print(platform.python_version()); "
    "print(os.path.realpath(sys.base_prefix))"
)
SYSTEM_PREFIXES = ("/usr", "/usr/local")  # bound into every sandbox anyway


@dataclass(frozen=True)
class Runtime:
    """The interpreter or runtime a toolchain is built with, as found on this machine."""

    path: str  # real path ("" for `command`)
    version: str  # e.g. "Python 3.11.2", "node v20.20.2 npm 11.19.1", "uv 0.9.0 Python 3.11.2"
    prefix: str | None = None  # python: sys.base_prefix, real; bound read-only inside


@dataclass(frozen=True)
class Layout:
    """Where a built toolchain's programs are, and what a check using it needs besides."""

    bin_dirs: tuple[str, ...]  # absolute; first on the check's PATH, in this order
    env: tuple[tuple[str, str], ...] = ()  # e.g. VIRTUAL_ENV, NODE_PATH
    # (repo-relative path in the scratch copy, absolute target): a symlink oms makes there
    # when the candidate has nothing at that path (node_modules beside package.json).
    links: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BuildRequest:
    toolchain: Toolchain
    runtime: Runtime
    files: Mapping[str, bytes]  # inputs_of(toolchain) -> bytes at the trusted base
    dest: Path  # the final directory: absolute, real, exists and is empty
    work: Path  # a private temporary directory, removed by the caller
    repo: Repo  # `command`: the sandbox's hidden paths
    loaded: LoadedPolicy  # `command`: the base's [sandbox] policy
    progress: Callable[[str], None]


def inputs_of(tc: Toolchain) -> tuple[str, ...]:
    """Repo-relative files read from the base: the lock, then its companions."""
    if tc.kind == "uv":
        return (tc.lock, kinds.beside_lock(tc.lock, "pyproject.toml"))
    if tc.kind == "node-npm":
        return (tc.lock, kinds.beside_lock(tc.lock, "package.json"))
    return (tc.lock,)


def _existing_runtime(tc: Toolchain) -> str:
    given = tc.runtime or ""
    what = "node" if tc.kind == "node-npm" else "python"
    real = os.path.realpath(given)
    if not os.path.isfile(real) or not os.access(real, os.X_OK):
        raise ToolchainUnavailable(f"toolchain {tc.name}: {what} {given} does not exist")
    return real


def _probe(tc: Toolchain, what: str, argv: list[str], env: dict[str, str]) -> list[str]:
    # cwd: a fresh empty directory oms made, never the repository.
    with tempfile.TemporaryDirectory(prefix="oms-probe-") as cwd:
        out = run_tool(tc.name, what, argv, cwd=Path(cwd), env=env, timeout_s=PROBE_TIMEOUT_S)
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    if not lines:
        raise ToolchainUnavailable(f"toolchain {tc.name}: {what} printed nothing")
    return lines


def _python_runtime(tc: Toolchain) -> Runtime:
    real = _existing_runtime(tc)
    lines = _probe(tc, "python version probe", [real, "-I", "-c", _PY_PROBE], dict(PROBE_ENV))
    if len(lines) != 2 or not os.path.isabs(lines[1]):
        raise ToolchainUnavailable(f"toolchain {tc.name}: {real} is not a usable Python")
    version, prefix = f"Python {lines[0]}", lines[1]
    if tc.kind == "uv":
        version = f"{_uv_version(tc)}; {version}"
    return Runtime(real, version, None if prefix in SYSTEM_PREFIXES else prefix)


def _uv_version(tc: Toolchain) -> str:
    uv = kinds.find_uv()
    if uv is None:
        raise ToolchainUnavailable(
            f"toolchain {tc.name}: uv not found; reinstall oms (it depends on uv)"
        )
    first = _probe(tc, "uv version probe", [uv, "--version"], dict(PROBE_ENV))[0]
    return " ".join(first.split()[:2])  # "uv 0.13.9 (x86_64-…)" -> "uv 0.13.9"


def _node_runtime(tc: Toolchain) -> Runtime:
    real = _existing_runtime(tc)
    npm = kinds.find_npm(real)
    if npm is None:
        raise ToolchainUnavailable(f"toolchain {tc.name}: npm not found beside {real} or on PATH")
    env = dict(PROBE_ENV, PATH=f"{os.path.dirname(real)}:{PROBE_ENV['PATH']}")
    node_v = _probe(tc, "node version probe", [real, "--version"], env)[-1]
    npm_v = _probe(tc, "npm version probe", [npm, "--version"], env)[-1]
    return Runtime(real, f"node {node_v}; npm {npm_v}")


def runtime_of(tc: Toolchain) -> Runtime:
    """Find and ask the runtime its version (outside the sandbox, isolated mode)."""
    if tc.kind in ("python-venv", "uv"):
        return _python_runtime(tc)
    if tc.kind == "node-npm":
        return _node_runtime(tc)
    return Runtime("", "command")


def layout_of(tc: Toolchain, dest: Path) -> Layout:
    if tc.kind in ("python-venv", "uv"):
        return Layout(bin_dirs=(str(dest / "bin"),), env=(("VIRTUAL_ENV", str(dest)),))
    if tc.kind == "node-npm":
        modules = str(dest / "node_modules")
        return Layout(
            bin_dirs=(str(dest / "node_modules" / ".bin"),),
            env=(("NODE_PATH", modules),),
            links=((kinds.beside_lock(tc.lock, "node_modules"), modules),),
        )
    return Layout(bin_dirs=(str(dest / "bin"),))


_BUILDERS = {
    "python-venv": kinds.build_python_venv,
    "uv": kinds.build_uv,
    "node-npm": kinds.build_node_npm,
    "command": build_command,
}


def build(req: BuildRequest) -> None:
    """Build `req.toolchain` into `req.dest`; ToolchainUnavailable on any failure.

    The lock bytes come from `req.files` (the trusted base); a missing one is refused.
    On failure `req.dest` is left as it is: the caller removes it.
    """
    tc = req.toolchain
    missing = [p for p in inputs_of(tc) if p not in req.files]
    if missing:
        raise ToolchainUnavailable(f"toolchain {tc.name}: {missing[0]} is not on the base")
    _BUILDERS[tc.kind](req)
