"""`oms toolchain lock`'s pure parts: which pyprojects it refuses, the extras it picks, the
uv argv and the environment uv gets (none of the user's UV_* settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.errors import ConfigError, UsageError
from gatekeeper.gates.toolchain import lock

STATIC = b'[project]\nname = "d"\nversion = "1"\ndependencies = ["iniconfig"]\n' \
    b'[project.optional-dependencies]\ntest = ["pytest"]\ndocs = ["sphinx"]\n'  # fmt: skip


@pytest.mark.parametrize("field", ["dependencies", "optional-dependencies"])
def test_dynamic_dependencies_are_refused_with_the_remedy(field: str) -> None:
    text = f'[project]\nname = "d"\nversion = "1"\ndynamic = ["{field}"]\n'.encode()
    with pytest.raises(ConfigError, match=f"declares {field} dynamic .*list them in"):
        lock.project_table(text, "pyproject.toml at main")


@pytest.mark.parametrize(("text", "says"), [
    (b"[tool.x]\na = 1\n", "no \\[project\\] table"),
    (b"[project\n", "not valid TOML"),
])  # fmt: skip
def test_a_pyproject_without_a_project_table_is_refused(text: bytes, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        lock.project_table(text, "pyproject.toml")


def test_the_test_extra_is_taken_unless_extras_are_named() -> None:
    project = lock.project_table(STATIC, "p")
    assert lock.chosen_extras(project, (), "p") == ("test",)
    assert lock.chosen_extras(project, ("docs", "docs", "test"), "p") == ("docs", "test")
    assert lock.chosen_extras({"name": "d"}, (), "p") == ()
    with pytest.raises(UsageError, match="no extra 'dev'; it has docs, test"):
        lock.chosen_extras(project, ("dev",), "p")


def test_the_argv_pins_hashes_builds_nothing_and_reads_no_config(tmp_path: Path) -> None:
    argv = lock.compile_argv("/u/uv", "/usr/bin/python3", tmp_path / "out", ("test",))
    assert argv[:3] == ["/u/uv", "pip", "compile"] and argv[-1] == "pyproject.toml"
    assert {"--generate-hashes", "--no-build", "--no-config", "--no-python-downloads"} <= set(argv)
    assert argv[argv.index("--extra") + 1] == "test"
    assert argv[argv.index("--python") + 1] == "/usr/bin/python3"


def test_uv_gets_no_uv_setting_of_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_INDEX_URL", "http://127.0.0.1:1/evil")
    monkeypatch.setenv("UV_CONFIG_FILE", "/tmp/evil.toml")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/evil")
    monkeypatch.setenv("PYTHONPATH", "/tmp/evil")
    env = lock.compile_env("/tmp/h", "/tmp/cache")
    assert env["HOME"] == "/tmp/h" and env["UV_CACHE_DIR"] == "/tmp/cache"
    assert not [k for k in env if k.startswith(("UV_", "PIP_", "PYTHON")) and k != "UV_CACHE_DIR"]
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "UV_CACHE_DIR", *lock._NETWORK_ENV}
