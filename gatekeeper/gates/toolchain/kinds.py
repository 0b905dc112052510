"""The four builders, each from the base's lock bytes in `req.files`, never the worktree.

python-venv: a venv without pip (symlinked interpreter), filled by oms' own pip in
hash-checking, binary-only mode. uv: `uv sync --frozen` into the destination, copying
(never hard-linking) out of uv's cache. node-npm: `npm ci` in the destination with install
scripts off. command: the policy's own command in the check sandbox, no network, with only
the destination writable. Unless `allow_build`, no package code runs at install time.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from uv import find_uv_bin

from .tools import INSTALL_TIMEOUT_S, run_tool
from .tree import ToolchainUnavailable

if TYPE_CHECKING:
    from .build import BuildRequest

# Host environment names that must not reach a build: the test suite's (or oms') own
# PYTHONPATH and friends, pip's "only in a venv" guard, another active venv.
_DROP_PREFIXES = ("PYTHON",)
_DROP_NAMES = ("PIP_REQUIRE_VIRTUALENV", "PIP_PYTHON", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT",
               "UV_PYTHON", "CONDA_PREFIX", "__PYVENV_LAUNCHER__")  # fmt: skip
NPM_LOCKS = ("package-lock.json", "npm-shrinkwrap.json")


def build_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host environment less PYTHON*, plus `extra` (the user's index settings stay)."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(_DROP_PREFIXES) and k not in _DROP_NAMES
    }  # fmt: skip
    env.update(extra or {})
    return env


def basename(path: str) -> str:
    return PurePosixPath(path).name


def beside_lock(lock: str, name: str) -> str:
    """The repo-relative path of `name` in the lock's directory ("" at the root)."""
    parent = PurePosixPath(lock).parent
    return name if str(parent) == "." else f"{parent}/{name}"


def pip_argv(python: Path, lock: Path, allow_build: bool) -> list[str]:
    """oms' own pip installing into `python`'s venv: every file hash-checked, no deps
    beyond the lock, wheels only unless sdists may be built. .pyc files are compiled
    (the tree is read-only in the sandbox; they are covered by the tree digest)."""
    argv = [sys.executable, "-m", "pip", "--python", str(python), "install",
            "--require-hashes", "--no-deps", "--no-input", "--disable-pip-version-check",
            "--no-warn-script-location"]  # fmt: skip
    if not allow_build:
        argv += ["--only-binary", ":all:"]
    return [*argv, "-r", str(lock)]


def uv_argv(uv: str, python: str, allow_build: bool) -> list[str]:
    """`uv sync` of exactly the lock (no resolution, no project install; every extra and
    dependency group included: the test runner is in one of them, and a check that cannot
    import it would blame the candidate for the environment), with the runtime given, no
    downloaded Pythons, no uv.toml from anywhere, files copied (a hard link would share
    inodes with uv's cache, and freezing the tree would change the cache, or a changed cache
    the tree)."""
    argv = [uv, "sync", "--frozen", "--no-install-project", "--all-extras", "--all-groups",
            "--python", python, "--no-python-downloads", "--no-config", "--link-mode", "copy",
            "--compile-bytecode", "--no-progress", "--color", "never"]  # fmt: skip
    if not allow_build:
        argv.append("--no-build")
    return argv


def npm_argv(npm: str, allow_build: bool) -> list[str]:
    """`npm ci`: exactly the lock, integrity-checked; no install scripts unless allowed."""
    argv = [npm, "ci"]
    if not allow_build:
        argv.append("--ignore-scripts")
    return [*argv, "--no-audit", "--no-fund", "--no-update-notifier"]


def npm_env(node: str, allow_build: bool) -> dict[str, str]:
    # npm is a `#!/usr/bin/env node` script: the runtime's own directory comes first.
    path = os.pathsep.join([os.path.dirname(node), os.environ.get("PATH", "/usr/bin:/bin")])
    extra = {"PATH": path}
    if not allow_build:
        extra["npm_config_ignore_scripts"] = "true"
    return build_env(extra)


def find_npm(node: str) -> str | None:
    """npm beside the real node (a nvm/fnm install), else npm on oms' PATH."""
    beside = os.path.join(os.path.dirname(node), "npm")
    return beside if os.path.exists(beside) else shutil.which("npm")


def find_uv() -> str | None:
    """The uv oms depends on (its wheel's binary), else uv on PATH."""
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    os.chmod(path, 0o644)


def _no_pip(req: BuildRequest) -> None:
    """Checks never install: a lock that brings pip along is refused, not trimmed."""
    lib = req.dest / "lib"
    found = sorted(str(p) for p in lib.glob("python*/site-packages/pip")) if lib.is_dir() else []
    if found or (req.dest / "bin" / "pip").exists():
        raise ToolchainUnavailable(
            f"toolchain {req.toolchain.name}: the venv holds pip ({req.toolchain.lock} "
            "installs it); remove pip from the lock: checks do not install"
        )


def build_python_venv(req: BuildRequest) -> None:
    tc, name = req.toolchain, req.toolchain.name
    lock = req.work / basename(tc.lock)
    _write(lock, req.files[tc.lock])
    req.progress(f"toolchain {name}: creating a venv with {req.runtime.version}")
    venv = [req.runtime.path, "-I", "-m", "venv", "--without-pip", "--symlinks", "--",
            str(req.dest)]  # fmt: skip
    run_tool(name, "venv", venv, cwd=req.work, env=build_env(), timeout_s=INSTALL_TIMEOUT_S)
    req.progress(f"toolchain {name}: pip install -r {tc.lock}")
    argv = pip_argv(req.dest / "bin" / "python", lock, tc.allow_build)
    run_tool(name, "pip install", argv, cwd=req.work, env=build_env(),
             timeout_s=INSTALL_TIMEOUT_S)  # fmt: skip
    _no_pip(req)


def build_uv(req: BuildRequest) -> None:
    tc, name = req.toolchain, req.toolchain.name
    uv = find_uv()
    if uv is None:
        raise ToolchainUnavailable(
            f"toolchain {name}: uv not found; reinstall oms (it depends on uv)"
        )
    _write(req.work / "uv.lock", req.files[tc.lock])
    _write(req.work / "pyproject.toml", req.files[beside_lock(tc.lock, "pyproject.toml")])
    req.progress(f"toolchain {name}: uv sync --frozen ({tc.lock})")
    env = build_env({"UV_PROJECT_ENVIRONMENT": str(req.dest)})
    argv = uv_argv(uv, req.runtime.path, tc.allow_build)
    run_tool(name, "uv sync", argv, cwd=req.work, env=env, timeout_s=INSTALL_TIMEOUT_S)
    _no_pip(req)


def build_node_npm(req: BuildRequest) -> None:
    tc, name = req.toolchain, req.toolchain.name
    npm = find_npm(req.runtime.path)
    if npm is None:
        raise ToolchainUnavailable(f"toolchain {name}: npm not found beside node or on PATH")
    lock_name = basename(tc.lock) if basename(tc.lock) in NPM_LOCKS else NPM_LOCKS[0]
    # npm ci installs beside package.json: the destination is that project directory.
    _write(req.dest / lock_name, req.files[tc.lock])
    _write(req.dest / "package.json", req.files[beside_lock(tc.lock, "package.json")])
    req.progress(f"toolchain {name}: npm ci ({tc.lock})")
    env = npm_env(req.runtime.path, tc.allow_build)
    argv = npm_argv(npm, tc.allow_build)
    run_tool(name, "npm ci", argv, cwd=req.dest, env=env, timeout_s=INSTALL_TIMEOUT_S)
