"""Building one toolchain from the base's lockfile, outside the sandbox (interface only:
the builders land in the next commit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gatekeeper.repo.git import Repo
from policy import LoadedPolicy, Toolchain


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
    raise NotImplementedError


def runtime_of(tc: Toolchain) -> Runtime:
    """Find and ask the runtime its version (outside the sandbox, isolated mode)."""
    raise NotImplementedError


def layout_of(tc: Toolchain, dest: Path) -> Layout:
    raise NotImplementedError


def build(req: BuildRequest) -> None:
    """Build `req.toolchain` into `req.dest`; ToolchainUnavailable on any failure."""
    raise NotImplementedError
