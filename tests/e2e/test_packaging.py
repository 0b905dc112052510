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
from support.pty import at_pty
from support.readme import readme_walk
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


@dataclass(frozen=True)
class Pipx:
    env: dict[str, str]  # built.env with pipx's folders, its bin dir and pipx on PATH
    oms: Path


@pytest.fixture(scope="module")
def pipx(built: Built) -> Pipx:
    """`pipx install .` as the README says, in the (copied) checkout; pipx itself from PyPI."""
    tools = built.elsewhere.parent / "pipx-venv"
    made = run([sys.executable, "-m", "venv", str(tools)], built.env, built.elsewhere)
    assert made.returncode == 0, made.stderr
    proc = run([str(tools / "bin" / "pip"), "install", "pipx"], built.env, built.elsewhere,
               timeout=INSTALL_TIMEOUT)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    bin_dir = tools.parent / "pipx-bin"
    bin_dir.mkdir()
    (bin_dir / "pipx").symlink_to(tools / "bin" / "pipx")  # on PATH, as a user's pipx is
    env = {**built.env, "PIPX_HOME": str(tools.parent / "pipx-home"),
           "PIPX_BIN_DIR": str(bin_dir), "PIPX_MAN_DIR": str(tools.parent / "pipx-man"),
           "PIPX_DEFAULT_PYTHON": sys.executable,
           "PATH": f"{bin_dir}:{built.env['PATH']}"}  # fmt: skip
    return Pipx(env, bin_dir / "oms")


# The README's "Use it on your repository" block, run line by line as printed. What a line
# needs from the human is typed at a pseudo-terminal: the answer to each prompt, by the
# line's first words. The comment line that stands for the agent's work is done here.
PROMPTS = {"oms init": (b"write oms.toml? [y/N]", b"y\n"),
           "oms policy trust": (b"Type 'yes'", b"yes\n")}  # fmt: skip
AGENT_WORK = "agent works and commits on a branch, here agent-work"
PROJECT = {
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
    'dependencies = []\n\n[project.optional-dependencies]\ntest = ["pytest"]\n',
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}


def _commit(repo: Path, env: Mapping[str, str], files: Mapping[str, str], message: str) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    for argv in (["add", "-A"], ["commit", "-q", "-m", message]):
        proc = run(["git", *argv], env, repo)
        assert proc.returncode == 0, proc.stderr


def test_the_readme_path_runs_as_printed_from_a_fresh_home(built: Built, pipx: Pipx) -> None:
    """pipx install -> init (a starter policy and its lock) -> commit and trust the policy ->
    prepare -> install the hooks -> an agent's branch is READY; then a planted key on another
    branch is BLOCKED and the installed Read hook denies `.env`. PyPI is reached through pip,
    pipx and uv only (the package registries)."""
    env = {**pipx.env, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid",
           "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}  # fmt: skip
    home = Path(env["HOME"])
    repo = home / "src" / "your-repo"
    repo.mkdir(parents=True)
    assert run(["git", "init", "-q", "-b", "main"], env, repo).returncode == 0
    _commit(repo, env, PROJECT, "a small Python project")
    cwd = built.source  # where `pipx install .` is typed: the checkout
    lines = readme_walk()
    assert lines[0].startswith("pipx install .") and any(AGENT_WORK in x for x in lines), lines
    shown: dict[str, str] = {}
    for line in lines:
        if line.startswith("cd "):
            proc = run(["bash", "-c", f"{line} && pwd"], env, cwd)
            assert proc.returncode == 0, (line, proc.stderr)
            cwd = Path(proc.stdout.strip())
            continue
        if line.startswith("#"):
            assert AGENT_WORK in line, line
            assert run(["git", "checkout", "-q", "-b", "agent-work"], env, repo).returncode == 0
            _commit(repo, env, {"calc.py": PROJECT["calc.py"] + "\n\ndef mul(a, b):\n"
                                "    return a * b\n",
                                "tests/test_mul.py": "from calc import mul\n\n\n"
                                "def test_mul():\n    assert mul(2, 3) == 6\n"},
                    "add mul")  # fmt: skip
            assert run(["git", "checkout", "-q", "main"], env, repo).returncode == 0
            continue
        prompt = next((p for k, p in PROMPTS.items() if line.startswith(k)), None)
        if prompt is None:
            proc = run(["bash", "-c", line], env, cwd, timeout=INSTALL_TIMEOUT)
            code, out = proc.returncode, proc.stdout + proc.stderr
        else:
            seen = at_pty(["-c", "import os, sys; os.execvp('bash', ['bash', '-c', sys.argv[1]])",
                           line], prompt[1], env=env, cwd=cwd, prompt=prompt[0],
                          stdio=True)  # fmt: skip
            code, out = seen.code, seen.screen + seen.err
        assert code == 0, (line, out[-3000:])
        shown[line.split("#")[0].strip()] = out
    verdict = shown["oms process-result --candidate agent-work"]
    assert "READY_FOR_HUMAN" in verdict, verdict[-3000:]
    assert (repo / "requirements.lock").is_file() and "--hash=sha256:" in (
        repo / "requirements.lock").read_text()  # fmt: skip
    # The installed oms is pipx's, not the checkout's.
    assert os.path.realpath(pipx.oms).startswith(env["PIPX_HOME"])

    # A planted key on another branch: BLOCKED, and the value never shows.
    assert run(["git", "checkout", "-q", "-b", "agent-key", "main"], env, repo).returncode == 0
    _commit(repo, env, {"settings.py": f'AWS_KEY = "{fake_aws_key()}"\n'}, "settings")
    assert run(["git", "checkout", "-q", "main"], env, repo).returncode == 0
    blocked = run(["oms", "process-result", "--candidate", "agent-key"], env, repo)
    assert blocked.returncode == 3 and "BLOCKED" in blocked.stdout, blocked.stdout + blocked.stderr
    assert fake_aws_key()[4:] not in blocked.stdout + blocked.stderr

    # The hook `oms install claude-code` wrote, run as Claude Code runs it: Read .env denied.
    (repo / ".env").write_text(f"AWS_ACCESS_KEY_ID={fake_aws_key()}\n")
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    (command,) = [h["command"] for group in settings["hooks"]["PreToolUse"]
                  for h in group["hooks"] if "oms" in h["command"]]  # fmt: skip
    body = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": str(repo),
            "tool_name": "Read", "tool_input": {"file_path": str(repo / ".env")}}  # fmt: skip
    denied = run(["bash", "-c", command], env, repo, input=json.dumps(body))
    assert "deny" in denied.stdout + denied.stderr or denied.returncode == 2, denied
    assert fake_aws_key()[4:] not in denied.stdout + denied.stderr


def test_pipx_install_of_the_checkout_gives_a_working_oms(built: Built, pipx: Pipx) -> None:
    oms = pipx.oms
    if not oms.exists():  # the README's own walk installs it; alone, this test does
        proc = run(["pipx", "install", "."], pipx.env, built.source, timeout=INSTALL_TIMEOUT)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    env = pipx.env
    shown = run([str(oms), "--version"], env, built.elsewhere)
    assert shown.returncode == 0 and "oms" in shown.stdout, shown.stderr
    scan = run([str(oms), "scan", "--stdin", "--json"], env, built.elsewhere,
               input=f'aws_key = "{fake_aws_key()}"\n')  # fmt: skip
    assert scan.returncode == 3, scan.stdout + scan.stderr
    target = os.path.realpath(oms)
    assert target.startswith(env["PIPX_HOME"]), target  # pipx's own venv, not the checkout
