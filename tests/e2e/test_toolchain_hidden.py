"""A pyenv-style interpreter in a path no sandbox may see: the toolchain builds (outside
the sandbox), and the gate refuses it as UNAVAILABLE naming that path, never FAILED."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import write_files
from support.toolchains import python_lock

SYSTEM_PYTHON = Path("/usr/bin/python3.11")
POLICY = """version = 1
[[toolchains]]
name = "py"
kind = "python-venv"
lock = "requirements.lock"
python = "{python}"

[[checks]]
name = "tests"
cmd = ["python", "-c", "print('the check ran')"]
toolchain = "py"
"""


def _pyenv_interpreter(home: Path) -> tuple[Path, Path]:
    """(interpreter, its prefix): a copy of the system python whose prefix is a pyenv
    versions directory below ~/.local/state, its stdlib a symlink into /usr/lib."""
    prefix = home / ".local" / "state" / "pyenv" / "versions" / "3.11"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    python = prefix / "bin" / "python3.11"
    shutil.copy2(SYSTEM_PYTHON, python)
    (prefix / "lib" / "python3.11").symlink_to("/usr/lib/python3.11")
    return python, prefix


@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs /usr/bin/python3.11 to copy")
def test_interpreter_in_a_hidden_path_is_unavailable_naming_it_not_failed(
    oms_json: Callable[..., tuple[int, dict[str, Any]]],
    git_repo: Path,
    run_git: Callable[..., str],
    oms_env: dict[str, str],
    tmp_path: Path,
) -> None:
    python, prefix = _pyenv_interpreter(Path(oms_env["HOME"]))
    ran = subprocess.run(
        [str(python), "-c", "import sys, json; print(sys.base_prefix)"],
        capture_output=True, text=True, env=oms_env, check=False,
    )  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.strip() == str(prefix), ran  # it runs, there

    write_files(git_repo, {"oms.toml": POLICY.format(python=python),
                           "requirements.lock": python_lock()})  # fmt: skip
    run_git(git_repo, "add", "-A")
    run_git(git_repo, "commit", "-qm", "policy with a pyenv toolchain")
    env_extra = {"OMS_TOOLCHAIN_DIR": str(tmp_path / "toolchains")}
    code, out = oms_json(["init", "--repo", str(git_repo)], env_extra=env_extra)
    assert code == 0, out
    code, out = oms_json(["toolchain", "prepare", "--repo", str(git_repo)],
                         env_extra=env_extra, timeout=600)  # fmt: skip
    assert code == 0, out  # built outside the sandbox, where the interpreter is reachable
    assert out["toolchains"][0]["state"] == "built", out

    run_git(git_repo, "checkout", "-q", "-b", "agent")
    write_files(git_repo, {"feature.py": "VALUE = 1\n"})
    run_git(git_repo, "add", "-A")
    run_git(git_repo, "commit", "-qm", "a change")
    code, out = oms_json(["process-result", "--repo", str(git_repo), "--candidate", "agent",
                          "--base", "main"], env_extra=env_extra, timeout=300)  # fmt: skip
    assert code == 4, out
    assert out["decision"] == "UNAVAILABLE", out
    assert out["checks"] == [], out  # nothing ran: not a FAILED check
    assert str(prefix) in out["error"]["message"], out
    assert any(str(prefix) in r for r in out["reasons"]), out
