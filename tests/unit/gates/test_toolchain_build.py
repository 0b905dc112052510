"""Toolchain builders without the network: argv, environment, layouts, inputs, messages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gatekeeper.gates.toolchain import kinds
from gatekeeper.gates.toolchain.build import (
    BuildRequest,
    Runtime,
    build,
    inputs_of,
    layout_of,
    runtime_of,
)
from gatekeeper.gates.toolchain.tools import last_line, run_tool
from gatekeeper.gates.toolchain.tree import ToolchainUnavailable
from policy import Toolchain

DEST = Path("/cache/oms/toolchains/abc")


def tc(kind: str, lock: str = "requirements.lock", **kw: object) -> Toolchain:
    if kind == "command":
        kw.setdefault("cmd", ["/bin/true"])
    return Toolchain.model_validate({"name": "t", "kind": kind, "lock": lock, **kw})


@pytest.mark.parametrize(
    ("kind", "lock", "want"),
    [
        ("python-venv", "requirements.lock", ("requirements.lock",)),
        ("command", "deps/go.sum", ("deps/go.sum",)),
        ("uv", "uv.lock", ("uv.lock", "pyproject.toml")),
        ("uv", "py/uv.lock", ("py/uv.lock", "py/pyproject.toml")),
        ("node-npm", "package-lock.json", ("package-lock.json", "package.json")),
        ("node-npm", "web/app/package-lock.json",
         ("web/app/package-lock.json", "web/app/package.json")),
    ],
)  # fmt: skip
def test_inputs_are_the_lock_then_its_companion_beside_it(
    kind: str, lock: str, want: tuple[str, ...]
) -> None:
    assert inputs_of(tc(kind, lock)) == want


def test_pip_argv_is_hash_checked_binary_only_and_reads_the_lock_after_r() -> None:
    argv = kinds.pip_argv(DEST / "bin/python", Path("/w/requirements.lock"), allow_build=False)
    assert argv[:5] == [sys.executable, "-m", "pip", "--python", str(DEST / "bin/python")]
    assert {"--require-hashes", "--no-deps", "--no-input"} <= set(argv)
    assert argv[argv.index("--only-binary") + 1] == ":all:"
    assert argv[-2:] == ["-r", "/w/requirements.lock"]


def test_pip_argv_allows_sdists_only_when_allow_build() -> None:
    argv = kinds.pip_argv(DEST / "bin/python", Path("/w/r.lock"), allow_build=True)
    assert "--only-binary" not in argv and "--require-hashes" in argv


def test_uv_argv_is_frozen_copying_and_no_build_unless_allowed() -> None:
    argv = kinds.uv_argv("/usr/bin/uv", "/usr/bin/python3.11", allow_build=False)
    assert argv[:2] == ["/usr/bin/uv", "sync"]
    assert {"--frozen", "--no-install-project", "--all-extras", "--all-groups",
            "--no-python-downloads", "--no-config", "--no-build"} <= set(argv)  # fmt: skip
    assert argv[argv.index("--python") + 1] == "/usr/bin/python3.11"
    assert argv[argv.index("--link-mode") + 1] == "copy"
    assert "--no-build" not in kinds.uv_argv("/u", "/p", allow_build=True)


def test_npm_argv_and_env_ignore_scripts_unless_allowed() -> None:
    assert kinds.npm_argv("/usr/bin/npm", allow_build=False)[:3] == [
        "/usr/bin/npm", "ci", "--ignore-scripts"]  # fmt: skip
    assert "--ignore-scripts" not in kinds.npm_argv("/usr/bin/npm", allow_build=True)
    assert kinds.npm_env("/opt/node/bin/node", False)["npm_config_ignore_scripts"] == "true"
    env = kinds.npm_env("/opt/node/bin/node", True)
    assert "npm_config_ignore_scripts" not in env
    assert env["PATH"].split(":")[0] == "/opt/node/bin"


def test_build_env_drops_python_variables_and_pip_venv_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("PYTHONHOME", "/else")
    monkeypatch.setenv("PIP_REQUIRE_VIRTUALENV", "1")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/simple")
    env = kinds.build_env({"UV_PROJECT_ENVIRONMENT": "/d"})
    assert not [k for k in env if k.startswith("PYTHON") or k == "PIP_REQUIRE_VIRTUALENV"]
    assert env["PIP_INDEX_URL"] == "http://127.0.0.1:1/simple"
    assert env["UV_PROJECT_ENVIRONMENT"] == "/d"


def test_layouts_per_kind() -> None:
    for kind in ("python-venv", "uv"):
        lay = layout_of(tc(kind), DEST)
        assert lay.bin_dirs == (f"{DEST}/bin",)
        assert lay.env == (("VIRTUAL_ENV", str(DEST)),)
        assert lay.links == ()
    node = layout_of(tc("node-npm", "web/package-lock.json"), DEST)
    assert node.bin_dirs == (f"{DEST}/node_modules/.bin",)
    assert node.env == (("NODE_PATH", f"{DEST}/node_modules"),)
    assert node.links == (("web/node_modules", f"{DEST}/node_modules"),)
    root = layout_of(tc("node-npm", "package-lock.json"), DEST)
    assert root.links == (("node_modules", f"{DEST}/node_modules"),)
    assert layout_of(tc("command", "x.lock"), DEST).bin_dirs == (f"{DEST}/bin",)


def test_runtime_of_refuses_a_missing_python(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "python3"
    with pytest.raises(
        ToolchainUnavailable, match=rf"^toolchain t: python {missing} does not exist$"
    ):
        runtime_of(tc("python-venv", python=str(missing)))


def test_runtime_of_refuses_a_missing_node(tmp_path: Path) -> None:
    with pytest.raises(ToolchainUnavailable, match=r"toolchain t: node .* does not exist"):
        runtime_of(tc("node-npm", "package-lock.json", node=str(tmp_path / "node")))


def test_runtime_of_command_is_nothing_to_probe() -> None:
    rt = runtime_of(tc("command", "x.lock"))
    assert (rt.path, rt.version, rt.prefix) == ("", "command", None)


def test_last_line_prefers_the_last_error_and_strips_control_characters() -> None:
    text = "Collecting six\nERROR: first\n\x1b[31mERROR: the real one\u202e\x1b[0m\n  detail\n"
    got = last_line(text)
    assert got.startswith("ERROR: the real one") and "\x1b" not in got and "\u202e" not in got


def test_last_line_skips_npm_log_pointer_and_is_bounded() -> None:
    npm = "npm error code EINTEGRITY\nnpm error A complete log of this run can be found in: /x\n"
    assert last_line(npm) == "npm error code EINTEGRITY"
    assert len(last_line("x" * 1000)) == 300


def test_run_tool_failure_names_toolchain_step_exit_and_last_line(tmp_path: Path) -> None:
    argv = ["/bin/sh", "-c", "echo noise >&2; echo 'ERROR: it broke' >&2; exit 3"]
    with pytest.raises(ToolchainUnavailable) as exc:
        run_tool("py", "pip install", argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                 timeout_s=30)  # fmt: skip
    assert str(exc.value) == "toolchain py: pip install failed (exit 3): ERROR: it broke"


def test_run_tool_keeps_only_the_tail_of_a_long_output(tmp_path: Path) -> None:
    argv = ["/bin/sh", "-c", "yes line | head -n 100000; echo last"]
    out = run_tool("py", "x", argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=30)
    assert len(out.stdout) <= 4096 and out.stdout.endswith("last\n")


def test_run_tool_times_out(tmp_path: Path) -> None:
    argv = ["/bin/sh", "-c", "sleep 60"]
    with pytest.raises(ToolchainUnavailable, match=r"^toolchain py: npm ci timed out after 1 s$"):
        run_tool("py", "npm ci", argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=1)


def test_run_tool_refuses_a_program_that_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(ToolchainUnavailable, match=r"^toolchain py: cannot run /nonexistent/uv: "):
        run_tool("py", "uv", ["/nonexistent/uv"], cwd=tmp_path, env={}, timeout_s=30)


def test_build_refuses_when_an_input_is_not_on_the_base(tmp_path: Path) -> None:
    t = tc("uv", "uv.lock")
    req = BuildRequest(toolchain=t, runtime=Runtime("/usr/bin/python3", "Python 3"),
                       files={"uv.lock": b""}, dest=tmp_path, work=tmp_path, repo=None,  # type: ignore[arg-type]
                       loaded=None, progress=print)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(
        ToolchainUnavailable, match=r"^toolchain t: pyproject.toml is not on the base$"
    ):
        build(req)


def test_runtime_of_refuses_node_without_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\necho v0\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainUnavailable, match=r"^toolchain t: npm not found beside "):
        runtime_of(tc("node-npm", "package-lock.json", node=str(node)))
