"""Packaging: a built wheel (and `pipx install .`) gives a user a working `oms`, without the
test tools, importing nothing from the source checkout.

Slow but real: the wheel is built by pip from a copy of this checkout (its build backend
from PyPI), installed into a fresh `python -m venv` with its dependencies from PyPI, and
the installed `oms` runs from a directory that is not the checkout, with no PYTHONPATH.
pipx itself is installed into a temporary venv from PyPI (it is not on the machine).

Fake secrets are built at runtime from pieces: this file holds no string a scanner would match.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from support.env import clean_env
from support.secrets import fake_aws_key

import gatekeeper

SOURCE = Path(gatekeeper.__file__).resolve().parent.parent
PACKAGES = ("gatekeeper", "sandbox", "evidence", "policy")
DISTRIBUTION = "oh-my-super-agent"
INSTALL_TIMEOUT = 900  # dependencies from PyPI


def run(argv: list[str], env: Mapping[str, str], cwd: Path, input: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(argv, env=dict(env), cwd=cwd, input=input, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def checkout_files() -> list[str]:
    """What this checkout holds (tracked, and new files not ignored), as git lists it."""
    proc = subprocess.run(["git", "-C", str(SOURCE), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, check=True)  # fmt: skip
    return [p for p in proc.stdout.decode().split("\0") if p and (SOURCE / p).is_file()]


# Read at import, before any fixture points HOME at a temporary directory.
USER_PIP_CACHE = os.environ.get("PIP_CACHE_DIR") or os.path.expanduser("~/.cache/pip")


@dataclass(frozen=True)
class Built:
    source: Path  # the copy the wheel was built from
    wheel: Path
    env: dict[str, str]  # a user's: private HOME, no PYTHONPATH
    elsewhere: Path  # not the checkout, not the copy


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("packaging")
    source = root / "src"
    for rel in checkout_files():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE / rel, source / rel)
    home = root / "home"
    home.mkdir()
    env = clean_env(home, root / "oms-state")
    env.pop("PYTHONPATH", None)  # the tests' own path: a user has none
    # The user's pip cache (a cache, not configuration: pip checks what it takes from it), so
    # that three installs of every dependency do not download them three times.
    env["PIP_CACHE_DIR"] = USER_PIP_CACHE
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    dist = root / "dist"
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(source)],
               env, root, timeout=INSTALL_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = dist.glob("oh_my_super_agent-*.whl")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return Built(source, wheel, env, elsewhere)


def test_the_wheel_holds_every_file_of_the_four_packages(built: Built) -> None:
    """Anything read at run time from the package directories is in the wheel."""
    wanted = {p for p in checkout_files() if p.split("/")[0] in PACKAGES}
    assert len(wanted) > 100, len(wanted)
    names = set(zipfile.ZipFile(built.wheel).namelist())
    assert wanted - names == set(), sorted(wanted - names)
    scripts = (
        zipfile.ZipFile(built.wheel)
        .read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
        .decode()
    )
    assert "oms = gatekeeper.cli.main:main" in scripts


@pytest.fixture(scope="module")
def venv(built: Built) -> Path:
    """A fresh venv with the wheel and its dependencies from PyPI, nothing else."""
    venv = built.elsewhere.parent / "venv"
    proc = run([sys.executable, "-m", "venv", str(venv)], built.env, built.elsewhere)
    assert proc.returncode == 0, proc.stderr
    proc = run([str(venv / "bin" / "pip"), "install", str(built.wheel)], built.env,
               built.elsewhere, timeout=INSTALL_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return venv


def _site_packages(venv: Path, env: Mapping[str, str], cwd: Path) -> str:
    proc = run([str(venv / "bin" / "python"), "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))"], env, cwd)  # fmt: skip
    return proc.stdout.strip()


def test_the_installed_oms_runs_from_site_packages_not_the_checkout(
    built: Built, venv: Path
) -> None:
    oms = str(venv / "bin" / "oms")
    shown = run([oms, "--version"], built.env, built.elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert version(DISTRIBUTION) in shown.stdout
    where = run([str(venv / "bin" / "python"), "-c",
                 "import gatekeeper, sandbox, evidence, policy; "
                 "print('\\n'.join(m.__file__ for m in (gatekeeper, sandbox, evidence, policy)))"],
                built.env, built.elsewhere)  # fmt: skip
    site = _site_packages(venv, built.env, built.elsewhere)
    for path in where.stdout.split():
        assert path.startswith(site + "/"), (path, site)
        assert not path.startswith(str(SOURCE)) and not path.startswith(str(built.source))
    head = Path(oms).read_text().splitlines()[0]
    assert head.startswith(f"#!{venv / 'bin' / 'python'}"), head  # the venv's interpreter


def test_the_installed_oms_doctor_answers_in_the_json_shape(built: Built, venv: Path) -> None:
    proc = run([str(venv / "bin" / "oms"), "doctor", "--json"], built.env, built.elsewhere)
    assert proc.returncode in (0, 4), proc.stderr  # ready, or not ready (not initialised)
    (line,) = proc.stdout.splitlines()
    report = json.loads(line)
    assert report["oms_exit_code"] == proc.returncode
    assert report["ok"] is (proc.returncode == 0) is report["ready"]
    assert {"problems", "remedies", "gitleaks", "probe", "key"} <= set(report), sorted(report)
    assert report["gitleaks"]["ok"] is True, report["gitleaks"]  # the wheel's pinned binary


def test_the_installed_oms_scan_blocks_a_fake_secret_on_stdin(built: Built, venv: Path) -> None:
    text = f'aws_key = "{fake_aws_key()}"\n'
    proc = run([str(venv / "bin" / "oms"), "scan", "--stdin", "--json"], built.env,
               built.elsewhere, input=text)  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["findings"] and {"rule", "line", "fingerprint", "scanner"} <= set(out["findings"][0])
    assert fake_aws_key()[4:] not in proc.stdout  # the value never shows


def test_the_test_tools_are_not_installed_for_a_user(built: Built, venv: Path) -> None:
    py = str(venv / "bin" / "python")
    for module in ("pytest", "hypothesis", "mypy", "ruff", "bandit"):
        proc = run([py, "-c", f"import {module}"], built.env, built.elsewhere)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, module
    listed = run([str(venv / "bin" / "pip"), "list", "--format=json"], built.env, built.elsewhere)
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert DISTRIBUTION in names and "pytest" not in names and "pre-commit" not in names


def test_pipx_install_of_the_checkout_gives_a_working_oms(built: Built) -> None:
    tools = built.elsewhere.parent / "pipx-venv"
    made = run([sys.executable, "-m", "venv", str(tools)], built.env, built.elsewhere)
    assert made.returncode == 0, made.stderr
    proc = run([str(tools / "bin" / "pip"), "install", "pipx"], built.env, built.elsewhere,
               timeout=INSTALL_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    env = {**built.env, "PIPX_HOME": str(tools.parent / "pipx-home"),
           "PIPX_BIN_DIR": str(tools.parent / "pipx-bin"),
           "PIPX_MAN_DIR": str(tools.parent / "pipx-man")}  # fmt: skip
    # `pipx install .` as the README says, in the (copied) checkout.
    proc = run([str(tools / "bin" / "pipx"), "install", "--python", sys.executable, "."], env,
               built.source, timeout=INSTALL_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    oms = Path(env["PIPX_BIN_DIR"]) / "oms"
    shown = run([str(oms), "--version"], env, built.elsewhere)
    assert shown.returncode == 0 and "oms" in shown.stdout, shown.stderr
    scan = run([str(oms), "scan", "--stdin", "--json"], env, built.elsewhere,
               input=f'aws_key = "{fake_aws_key()}"\n')  # fmt: skip
    assert scan.returncode == 3, scan.stdout + scan.stderr
    target = os.path.realpath(oms)
    assert target.startswith(env["PIPX_HOME"]), target  # pipx's own venv, not the checkout
