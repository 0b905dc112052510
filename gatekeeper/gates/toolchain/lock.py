"""`oms toolchain lock`: a hash-pinned `requirements.lock` for a python-venv toolchain,
resolved by uv from pyproject.toml as committed on the default branch.

The pyproject is read through oms' own git from the default branch and copied into a fresh
temporary folder: the worktree (the agent's ground) never feeds the resolver, and uv reads
no uv.toml (`--no-config`), no UV_* setting of the user's and builds nothing (`--no-build`):
a project whose dependencies need a build to be known (`dynamic`) is refused instead.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gatekeeper.errors import ConfigError, UsageError
from gatekeeper.outfile import check_output, write_output
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_committed_file
from gatekeeper.repo.refs import default_branch_ref
from policy import PolicyError

from .kinds import find_uv
from .tools import INSTALL_TIMEOUT_S, run_tool
from .tree import ToolchainUnavailable

PYPROJECT = "pyproject.toml"
DEFAULT_LOCK = "requirements.lock"
TEST_EXTRAS = ("test", "tests", "testing")  # what a plan that runs the tests needs
MAX_PYPROJECT_BYTES = 1 << 20
# Not UV_*: what reaches the index at all (a proxy, the machine's CA bundle).
_NETWORK_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")  # fmt: skip


class Locked(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    path: str
    branch: str
    commit: str
    extras: tuple[str, ...]
    packages: int
    next_steps: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def project_table(data: bytes, where: str) -> dict[str, Any]:
    """The `[project]` table of a pyproject whose dependencies are static (ConfigError,
    with the remedy, when they are dynamic, absent or the file is not TOML)."""
    try:
        project = tomllib.loads(data.decode("utf-8")).get("project")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}") from None
    if not isinstance(project, dict):
        raise ConfigError(f"{where} has no [project] table; list the dependencies there")
    dynamic = project.get("dynamic") or []
    named = [f for f in ("dependencies", "optional-dependencies") if f in dynamic]
    if named:
        raise ConfigError(f"{where} declares {' and '.join(named)} dynamic (only a build "
                          "could tell them): list them in [project] and commit it")  # fmt: skip
    return project


def chosen_extras(project: dict[str, Any], asked: Sequence[str], where: str) -> tuple[str, ...]:
    """The extras named, else the project's test extras (the plan runs the tests)."""
    known = project.get("optional-dependencies") or {}
    if not asked:
        return tuple(e for e in TEST_EXTRAS if e in known)
    missing = [e for e in asked if e not in known]
    if missing:
        raise UsageError(f"{where} has no extra {missing[0]!r}; it has "
                         f"{', '.join(sorted(known)) or 'none'}")  # fmt: skip
    return tuple(dict.fromkeys(asked))


def compile_argv(uv: str, python: str, out: Path, extras: Sequence[str]) -> list[str]:
    """`uv pip compile` with every package pinned by hash, nothing built, no config file."""
    argv = [uv, "pip", "compile", "--generate-hashes", "--no-build", "--no-config",
            "--python", python, "--no-python-downloads", "--quiet", "--no-progress",
            "--color", "never", "--custom-compile-command", "oms toolchain lock",
            "--output-file", str(out)]  # fmt: skip
    for extra in extras:
        argv += ["--extra", extra]
    return [*argv, PYPROJECT]


def compile_env(home: str, cache: str) -> dict[str, str]:
    """PATH, HOME, TMPDIR and uv's cache; no UV_* (an index, a config) from the user."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "UV_CACHE_DIR": cache,
           "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir())}  # fmt: skip
    env.update({k: os.environ[k] for k in _NETWORK_ENV if k in os.environ})
    return env


def _uv_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "uv")


def _target(top: Path, output: str) -> Path:
    path = top / output
    if not path.parent.resolve().is_relative_to(top.resolve()):
        raise UsageError(f"{output}: name a path inside the worktree")
    check_output(path)  # never onto a symlink, a device or a directory
    return path


def lock(repo_dir: Path, output: str, extras: Sequence[str], python: str,
         progress: Callable[[str], None]) -> Locked:  # fmt: skip
    """Write `output` (worktree-relative) from the default branch's pyproject.toml."""
    repo = open_repo(repo_dir)
    path = _target(repo.top, output)
    branch, commit = default_branch_ref(repo)
    try:
        data = read_committed_file(repo, commit, PYPROJECT)
    except PolicyError as exc:
        raise ConfigError(str(exc)) from None
    where = f"{PYPROJECT} at {branch.removeprefix('refs/heads/')} ({commit[:12]})"
    if data is None:
        raise ConfigError(f"no {where}; commit it on the default branch, then lock")
    if len(data) > MAX_PYPROJECT_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_PYPROJECT_BYTES >> 20} MB")
    chosen = chosen_extras(project_table(data, where), extras, where)
    uv = find_uv()
    if uv is None:
        raise ToolchainUnavailable("lock: uv not found; reinstall oms (it depends on uv)")
    progress(f"uv pip compile --generate-hashes {where}" + "".join(f" --extra {e}" for e in chosen))
    with tempfile.TemporaryDirectory(prefix="oms-lock-") as tmp:
        work = Path(tmp)
        (work / PYPROJECT).write_bytes(data)
        (work / "home").mkdir()
        out = work / "requirements.lock"
        argv = compile_argv(uv, python, out, chosen)
        env = compile_env(str(work / "home"), _uv_cache())
        run_tool("lock", "uv pip compile", argv, cwd=work, env=env, timeout_s=INSTALL_TIMEOUT_S)
        text = out.read_text(encoding="utf-8")
    write_output(path, text)
    rel = str(path.relative_to(repo.top))
    steps = (f"git add {rel} && git commit   # on the default branch: toolchains are built "
             "from what is committed there", "oms toolchain prepare")  # fmt: skip
    return Locked(path=str(path), branch=branch, commit=commit, extras=chosen,
                  packages=_packages(text),
                  next_steps=steps)  # fmt: skip


def _packages(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln and not ln[0].isspace() and "==" in ln)
