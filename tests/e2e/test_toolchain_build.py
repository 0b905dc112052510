"""Toolchain builds with the real pip, uv and npm against the real registries (PyPI,
registry.npmjs.org), and the `command` kind in the real check sandbox."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import toolchains as data
from support.repos import make_repo
from uv import find_uv_bin

from gatekeeper.gates.toolchain import kinds
from gatekeeper.gates.toolchain.build import BuildRequest, build, runtime_of
from gatekeeper.gates.toolchain.tree import ToolchainUnavailable
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from policy import Toolchain

# uv comes with oms' test extra, in the interpreter's own bin directory.
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="session", autouse=True)
def _package_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One pip, uv and npm cache for the session: repeated builds download nothing."""
    root = tmp_path_factory.mktemp("tool-caches")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_CACHE_DIR", str(root / "pip"))
        mp.setenv("UV_CACHE_DIR", str(root / "uv"))
        mp.setenv("npm_config_cache", str(root / "npm"))
        mp.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
        yield


def request(tmp_path: Path, tc: Toolchain, files: dict[str, str]) -> BuildRequest:
    dest, work = tmp_path / "dest", tmp_path / "work"
    dest.mkdir()
    work.mkdir()
    steps: list[str] = []
    return BuildRequest(
        toolchain=tc, runtime=runtime_of(tc), files={k: v.encode() for k, v in files.items()},
        dest=dest, work=work, repo=None, loaded=None, progress=steps.append,  # type: ignore[arg-type]
    )  # fmt: skip


def py_toolchain() -> Toolchain:
    return Toolchain(name="py", kind="python-venv", lock="requirements.lock")


def test_python_venv_builds_from_the_lock_with_a_symlinked_interpreter_and_no_pip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "leak"))  # must not reach the build
    req = request(tmp_path, py_toolchain(), {"requirements.lock": data.python_lock()})
    build(req)
    python = req.dest / "bin" / "python"
    assert python.is_symlink() and os.path.realpath(python) == req.runtime.path
    out = subprocess.run(
        [str(python), "-I", "-c", "import six, idna, pytest; print('ok', pytest.__version__)"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.strip() == "ok 8.4.2"
    assert (req.dest / "bin" / "pytest").exists()
    assert not list(req.dest.glob("lib/python*/site-packages/pip"))
    assert not (req.dest / "bin" / "pip").exists()
    assert not list(req.dest.rglob("*leak*"))


def test_python_venv_refuses_a_lock_line_whose_hash_does_not_match(tmp_path: Path) -> None:
    req = request(tmp_path, py_toolchain(), {"requirements.lock": data.python_lock_wrong_hash()})
    with pytest.raises(ToolchainUnavailable) as exc:
        build(req)
    msg = str(exc.value)
    assert msg.startswith("toolchain py: pip install failed (exit 1): ERROR: THESE PACKAGES DO")
    assert "MATCH THE HASHES" in msg and len(msg) < 400 and "\n" not in msg


def test_python_venv_refuses_a_lock_without_hashes(tmp_path: Path) -> None:
    req = request(
        tmp_path, py_toolchain(), {"requirements.lock": data.python_lock_without_hashes()}
    )
    with pytest.raises(
        ToolchainUnavailable, match=r"toolchain py: pip install failed .*Hashes are required"
    ):
        build(req)
    assert not list(req.dest.glob("lib/python*/site-packages/six.py"))


def test_node_npm_builds_and_the_package_resolves_through_node_path(tmp_path: Path) -> None:
    pkg, lock = data.node_project()
    tc = Toolchain(name="web", kind="node-npm", lock="app/package-lock.json")
    req = request(tmp_path, tc, {"app/package-lock.json": lock, "app/package.json": pkg})
    assert req.runtime.version.startswith("node v") and "; npm " in req.runtime.version
    build(req)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run(
        [req.runtime.path, "-e", "console.log(require('is-number')(7))"], cwd=elsewhere,
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "NODE_PATH": str(req.dest / "node_modules")},
    )  # fmt: skip
    assert out.stdout.strip() == "true"


def test_node_npm_refuses_a_lock_whose_integrity_does_not_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("npm_config_fetch_retries", "0")  # npm retries a mismatch for minutes
    pkg, lock = data.node_project()
    bad = lock.replace("sha512-41Cifkg6e8Ty", "sha512-00Cifkg6e8Ty")
    tc = Toolchain(name="web", kind="node-npm", lock="package-lock.json")
    req = request(tmp_path, tc, {"package-lock.json": bad, "package.json": pkg})
    with pytest.raises(ToolchainUnavailable) as exc:
        build(req)
    assert str(exc.value).startswith("toolchain web: npm ci failed (exit 1): npm error")
    assert "integrity" in str(exc.value).lower()
    assert not (req.dest / "node_modules" / "is-number").exists()


def test_uv_builds_the_locked_project_with_its_dev_group(tmp_path: Path) -> None:
    pyproject, lock = data.uv_project()
    tc = Toolchain(name="u", kind="uv", lock="uv.lock")
    req = request(tmp_path, tc, {"uv.lock": lock, "pyproject.toml": pyproject})
    assert req.runtime.version.startswith("uv 0.") or req.runtime.version.startswith("uv ")
    build(req)
    python = req.dest / "bin" / "python"
    assert os.path.realpath(python) == req.runtime.path
    out = subprocess.run(
        [str(python), "-I", "-c", "import six, idna, pytest; print('ok')"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.strip() == "ok"
    assert not list(req.dest.glob("lib/python*/site-packages/pip"))


def test_uv_of_the_oms_install_is_used_whatever_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("uv") is None
    assert kinds.find_uv() == find_uv_bin()  # oms depends on uv: its wheel's binary
    runtime_of(Toolchain(name="u", kind="uv", lock="uv.lock"))


def test_uv_missing_from_the_install_and_path_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def gone() -> str:
        raise FileNotFoundError("uv")

    monkeypatch.setattr(kinds, "find_uv_bin", gone)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainUnavailable, match=r"^toolchain u: uv not found; reinstall oms"):
        runtime_of(Toolchain(name="u", kind="uv", lock="uv.lock"))


EXTRAS_PYPROJECT = """[project]
name = "demo"
version = "0.1"
requires-python = ">=3.11"
dependencies = ["iniconfig"]

[project.optional-dependencies]
test = ["pytest"]
"""


def test_uv_installs_the_test_extra_the_plan_needs(tmp_path: Path) -> None:
    """pytest in [project.optional-dependencies] test, not in a group: it is installed
    (without it, a check fails "No module named pytest", blamed on the candidate)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(EXTRAS_PYPROJECT)
    uv = kinds.find_uv()
    assert uv is not None
    subprocess.run([uv, "lock", "--no-config", "--python", sys.executable, "--quiet"],
                   cwd=proj, check=True, timeout=300)  # fmt: skip
    tc = Toolchain(name="u", kind="uv", lock="uv.lock")
    req = request(tmp_path, tc, {"uv.lock": (proj / "uv.lock").read_text(),
                                 "pyproject.toml": EXTRAS_PYPROJECT})  # fmt: skip
    build(req)
    out = subprocess.run(
        [str(req.dest / "bin" / "python"), "-I", "-c", "import iniconfig, pytest; print('ok')"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.strip() == "ok"


def test_python_venv_refuses_a_lock_that_installs_pip(tmp_path: Path) -> None:
    req = request(tmp_path, py_toolchain(), {"requirements.lock": data.python_lock_with_pip()})
    with pytest.raises(ToolchainUnavailable, match=r"^toolchain py: the venv holds pip"):
        build(req)


def test_python_venv_without_allow_build_refuses_an_sdist_only_lock(tmp_path: Path) -> None:
    req = request(tmp_path, py_toolchain(), {"requirements.lock": data.python_lock_sdist_only()})
    with pytest.raises(ToolchainUnavailable) as exc:
        build(req)
    assert str(exc.value).startswith("toolchain py: pip install failed (exit 1): ERROR:")
    assert not list(req.dest.glob("lib/python*/site-packages/six.py"))


LOCK = "deps/tool.lock"
# Prints its markers into the output (the build returns no stdout): proof that it ran inside.
BUILD = (
    'echo start > "$OMS_TOOLCHAIN_OUT/start"; mkdir -p "$OMS_TOOLCHAIN_OUT/bin" && '
    'cp tool.lock "$OMS_TOOLCHAIN_OUT/bin/lock-copy" && env > "$OMS_TOOLCHAIN_OUT/env" && '
    'pwd > "$OMS_TOOLCHAIN_OUT/pwd"; touch "$OMS_TOOLCHAIN_OUT/../escaped" 2>/dev/null; '
    'echo end > "$OMS_TOOLCHAIN_OUT/end"'
)


def command_request(tmp_path: Path, script: str) -> BuildRequest:
    top = make_repo(tmp_path / "repo", {LOCK: "locked bytes in the worktree\n"})
    repo = open_repo(top)
    loaded = read_policy_at(repo, resolve_commit(top, "HEAD"))
    tc = Toolchain(name="cmdtc", kind="command", lock=LOCK, cmd=["/bin/sh", "-c", script])
    (tmp_path / "out").mkdir()
    dest, work = tmp_path / "out" / "dest", tmp_path / "work"
    dest.mkdir()
    work.mkdir()
    return BuildRequest(
        toolchain=tc, runtime=runtime_of(tc), files={LOCK: b"base lock bytes\n"}, dest=dest,
        work=work, repo=repo, loaded=loaded, progress=lambda _line: None,
    )  # fmt: skip


@pytest.mark.usefixtures("oms_home")
def test_command_builds_in_the_sandbox_from_the_base_lock_into_dest_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_TEST_HOST_ONLY", "host-value")
    req = command_request(tmp_path, BUILD)
    build(req)
    out = req.dest
    assert (out / "start").read_text() == "start\n" and (out / "end").read_text() == "end\n"
    assert (out / "bin" / "lock-copy").read_bytes() == b"base lock bytes\n"  # not the worktree's
    env = (out / "env").read_text()
    assert f"OMS_TOOLCHAIN_OUT={out}" in env and "OMS_TEST_HOST_ONLY" not in env
    assert (out / "pwd").read_text().strip() == "/workspace"
    assert not (tmp_path / "out" / "escaped").exists()
    assert (out / "bin").stat().st_uid == os.geteuid()  # handed back after the run


@pytest.mark.usefixtures("oms_home")
def test_command_that_exits_1_is_refused_with_its_last_stderr_line(tmp_path: Path) -> None:
    req = command_request(
        tmp_path, "echo start; echo 'first' >&2; echo 'cannot build: no go' >&2; exit 1"
    )
    with pytest.raises(ToolchainUnavailable) as exc:
        build(req)
    assert str(exc.value) == "toolchain cmdtc: build command failed (exit 1): cannot build: no go"
