"""Fail closed, readiness and the `oms sandbox run` contract.

- No bwrap, a bwrap too old, a failing probe: exit 4 (`unavailable`) and the
  user's command never reaches the sandbox runner (nothing from the repository
  is even copied).
- `oms doctor --json` on this machine: ready, with the system bwrap and a real probe.
- The probe parser really checks: each way a sandbox can be broken, fabricated
  into otherwise real probe output, yields a failure.
- The JSON contract of `oms sandbox run`, and a profile digest that is stable and
  follows the limits in `oms.toml`.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json
from support.repos import commit_policy as commit_plan
from support.repos import git as _git
from support.repos import make_repo
from support.sandbox import SH, cli_env, sandbox_toml

import gatekeeper.gates.doctor as doctor_mod
import gatekeeper.gates.sandboxed as gs
from gatekeeper.errors import EXIT_UNAVAILABLE, Unavailable, classify
from gatekeeper.gates.authority import AgentSandbox
from gatekeeper.gates.sandboxed import sandbox_run
from policy import SandboxPolicy
from sandbox import SandboxUnavailable, cgroup, check_profile, find_bwrap
from sandbox import run as sandbox_exec

# `sandbox` re-exports the function `probe`, which shadows the submodule attribute.
sb = importlib.import_module("sandbox.bwrap")
sp = importlib.import_module("sandbox.probe")

HAVE_BWRAP = os.access("/usr/bin/bwrap", os.X_OK)
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="needs /usr/bin/bwrap")


# ---------------------------------------------------------------- fixtures ---


def commit_policy(repo: Path, sandbox_policy: dict[str, int]) -> None:
    (repo / "oms.toml").write_text(sandbox_toml(sandbox_policy))
    _git(repo, "add", "oms.toml")
    _git(repo, "commit", "-q", "-m", "policy")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    home = tmp_path / "home"
    home.mkdir()
    oms_home = tmp_path / "oms-state"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OMS_HOME", str(oms_home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.delenv("OMS_BWRAP_ALLOW_WHEEL", raising=False)
    return {"home": home, "oms_home": oms_home}


@pytest.fixture
def repo(tmp_path: Path, state: dict[str, Path]) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def git_only_path(tmp_path: Path) -> str:
    """A PATH holding git and nothing else (no bwrap anywhere on it)."""
    real_git = shutil.which("git")
    assert real_git
    d = tmp_path / "git-only-bin"
    d.mkdir()
    (d / "git").symlink_to(real_git)
    return str(d)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Record any attempt to copy the repository or run the user's command in the sandbox."""
    calls: dict[str, list[Any]] = {"copy": [], "exec": []}

    def fake_copy(*args: Any, **kwargs: Any) -> Path:
        calls["copy"].append(args)
        raise AssertionError("the repository was copied for a run that must not happen")

    def fake_exec(*args: Any, **kwargs: Any) -> Any:
        calls["exec"].append(args)
        raise AssertionError("the user's command reached the sandbox runner")

    monkeypatch.setattr(gs, "copy_commit", fake_copy)
    monkeypatch.setattr(gs, "sandbox_exec", fake_exec)
    return calls


def run_cli_json(argv: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    return proc.returncode, parse_single_json(proc)


def oms(*args: str) -> list[str]:
    return [sys.executable, "-m", "gatekeeper", *args]


def _refused(repo: Path) -> Unavailable:
    with pytest.raises(Unavailable) as info:
        sandbox_run(repo, [SH, "-c", "echo ran"], 10)
    assert classify(info.value) == (EXIT_UNAVAILABLE, "unavailable")
    return info.value


# ------------------------------------------------------------ fail closed ---


def test_missing_bwrap_refuses_with_exit_4_and_runs_nothing(
    repo: Path,
    recorder: dict[str, list[Any]],
    git_only_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sb, "SYSTEM_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setenv("PATH", git_only_path)
    assert sb.candidates() == []
    exc = _refused(repo)
    assert "not installed" in str(exc)
    assert recorder == {"copy": [], "exec": []}


def test_too_old_bwrap_refuses_with_exit_4_and_runs_nothing(
    repo: Path,
    recorder: dict[str, list[Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "fake-bwrap.log"
    fake = tmp_path / "fake-bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        'case "$1" in --version) echo "bubblewrap 0.3.0";; '
        "--help) echo '--unshare-user --unshare-pid --unshare-net --die-with-parent "
        "--new-session --clearenv --size --disable-userns';; "
        '*) touch "' + str(tmp_path / "RAN") + '"; exec "$@";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sb, "SYSTEM_BWRAP", str(fake))
    exc = _refused(repo)
    assert "0.3.0" in str(exc)
    assert recorder == {"copy": [], "exec": []}
    # The fake bwrap was only asked what it is; it never ran anything (no fallback either).
    assert set(log.read_text().split()) <= {"--version", "--help"}
    assert not (tmp_path / "RAN").exists()


def test_bwrap_lacking_a_required_flag_refuses(
    repo: Path, recorder: dict[str, list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "fake-bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in --version) echo "bubblewrap 0.9.0";; '
        "--help) echo '--unshare-user --unshare-pid --unshare-net --die-with-parent';; "
        '*) touch "' + str(tmp_path / "RAN") + '";; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sb, "SYSTEM_BWRAP", str(fake))
    exc = _refused(repo)
    assert "--disable-userns" in str(exc)
    assert recorder == {"copy": [], "exec": []}
    assert not (tmp_path / "RAN").exists()


@needs_bwrap
def test_failed_probe_refuses_with_exit_4_and_runs_nothing(
    repo: Path, recorder: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def failing_check(text: str, profile: Any, hidden: Any) -> list[str]:
        seen.append(text)
        return ["network interfaces visible: ['lo', 'eth0']"]

    monkeypatch.setattr(sp, "check_output", failing_check)
    exc = _refused(repo)
    assert "probe failed" in str(exc) and "eth0" in str(exc)
    assert len(seen) == 1 and "@end" in seen[0]  # the real probe ran, and only it
    assert recorder == {"copy": [], "exec": []}


@needs_bwrap
def test_probe_that_cannot_start_bwrap_refuses(
    repo: Path, recorder: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_run(*args: Any, **kwargs: Any) -> Any:
        raise SandboxUnavailable("cannot start bwrap: Operation not permitted")

    monkeypatch.setattr(sp, "run", broken_run)
    exc = _refused(repo)
    assert "Operation not permitted" in str(exc)
    assert recorder == {"copy": [], "exec": []}


def test_cli_without_bwrap_exits_4_with_unavailable_json(
    repo: Path, state: dict[str, Path], git_only_path: str
) -> None:
    wrapper = (
        "import sys, sandbox.bwrap as b\n"
        "b.SYSTEM_BWRAP = '/nonexistent/bwrap'\n"
        "from gatekeeper.cli.main import main\n"
        "main()\n"
    )
    argv = [sys.executable, "-c", wrapper, "sandbox", "run", "--repo", str(repo), "--json",
            "--", SH, "-c", "echo ran"]  # fmt: skip
    code, obj = run_cli_json(argv, cli_env(state, PATH=git_only_path))
    assert code == EXIT_UNAVAILABLE
    assert obj["ok"] is False
    assert obj["error"]["kind"] == "unavailable"
    assert "bubblewrap" in obj["error"]["message"]
    assert "exit_code" not in obj and "stdout" not in obj


# ----------------------------------------------------------------- doctor ---


@needs_bwrap
def test_doctor_reports_ready_with_system_bwrap_and_passing_probe(
    repo: Path, state: dict[str, Path]
) -> None:
    env = cli_env(state)
    code, _ = run_cli_json(oms("init", "--repo", str(repo), "--json"), env)
    assert code == 0
    commit_plan(repo, env=env)  # a plan (trusted at a pty): without one, not ready
    code, report = run_cli_json(oms("doctor", "--repo", str(repo), "--json"), env)
    assert code == 0, report
    assert report["ready"] is True
    assert report["probe"]["ok"] is True and report["probe"]["failures"] == []
    assert report["probe"]["profile_digest"].startswith("sha256:")
    assert report["bwrap"]["path"] == "/usr/bin/bwrap"
    assert report["bwrap"]["source"] == "system"
    for key in ("restrict_unprivileged_userns", "bwrap_userns_restrict_loaded",
                "unprivileged_userns_clone"):  # fmt: skip
        assert key in report["apparmor"]
    assert report["key"]["ok"] is True
    assert report["kernel_memory"]["bounded"] is (cgroup.support().kind is not None)


@needs_bwrap
def test_doctor_warns_but_stays_ready_when_kernel_memory_cannot_be_capped(
    repo: Path, state: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _ = run_cli_json(oms("init", "--repo", str(repo), "--json"), cli_env(state))
    assert code == 0
    commit_plan(repo, env=cli_env(state))  # a plan (trusted at a pty): without one, not ready
    no_cgroup = cgroup.Support(None, "no cgroup v2 with memory delegated (test)")
    monkeypatch.setattr(doctor_mod, "cgroup_support", lambda: no_cgroup)
    monkeypatch.setattr(cgroup, "support", lambda: no_cgroup)
    found = doctor_mod.doctor(repo, AgentSandbox(inside=False))
    report, ready = found.to_json(), found.ready
    assert ready is True and report["probe"]["ok"] is True, report
    km = report["kernel_memory"]
    assert km["bounded"] is False and km["cgroup"] is None
    assert "not capped" in km["warning"] and "(test)" in km["reason"]


def test_doctor_without_bwrap_is_not_ready(
    repo: Path, state: dict[str, Path], git_only_path: str
) -> None:
    wrapper = (
        "import sandbox.bwrap as b\n"
        "b.SYSTEM_BWRAP = '/nonexistent/bwrap'\n"
        "from gatekeeper.cli.main import main\n"
        "main()\n"
    )
    env = cli_env(state, PATH=git_only_path)
    code, report = run_cli_json(
        [sys.executable, "-c", wrapper, "doctor", "--repo", str(repo), "--json"], env
    )
    assert code == EXIT_UNAVAILABLE
    assert report["ready"] is False
    assert report["probe"]["ok"] is False
    assert "error" in report["bwrap"]


# ------------------------------------------------------------ probe parser ---


@pytest.fixture(scope="module")
def real_probe() -> tuple[str, Any, list[str]]:
    """Real probe output from the real sandbox, for the default policy."""
    if not HAVE_BWRAP:
        pytest.skip("needs /usr/bin/bwrap")
    profile = check_profile(SandboxPolicy(), environ={"HOME": "/nonexistent-home"})
    hidden = ["/root", "/etc/shadow"]
    scratch = Path(tempfile.mkdtemp(prefix="oms-probe-test-"))
    try:
        result = sandbox_exec(
            profile, scratch, [SH, "-c", sp._SCRIPT, "probe", *hidden], bw=find_bwrap()
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert result.exit_code == 0, result.stderr.display()
    return result.stdout.kept.decode(), profile, hidden


def _in_section(text: str, section: str, line: str) -> str:
    return text.replace(f"@{section}\n", f"@{section}\n{line}\n", 1)


def _sub_line(pattern: str, repl: str) -> Callable[[str], str]:
    def apply(text: str) -> str:
        new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        assert n == 1, pattern
        return new

    return apply


MUTATIONS: dict[str, tuple[Callable[[str], str], str]] = {
    "extra_interface": (
        lambda t: t.replace(
            "@env\n",
            "  eth0: 1234 10 0 0 0 0 0 0 5678 10 0 0 0 0 0 0\n@env\n",
            1,
        ),
        "network interfaces visible",
    ),
    "leaked_env": (
        lambda t: _in_section(t, "env", "OMS_TEST_TOKEN=ghp_abc"),
        "environment not clear: ['OMS_TEST_TOKEN']",
    ),
    "wrong_max_procs": (
        _sub_line(r"^(Max processes\s+)\d+", r"\g<1>4096"),
        "limit max_procs",
    ),
    "unlimited_memory": (
        _sub_line(r"^(Max address space\s+)\d+", r"\g<1>unlimited"),
        "limit memory_mb",
    ),
    "cap_eff": (
        _sub_line(r"^CapEff:\s*[0-9a-f]+$", "CapEff:\t000001ffffffffff"),
        "capabilities held: CapEff",
    ),
    "userns_allowed": (
        _sub_line(r"^(@userns\n)\w+$", r"\g<1>allowed"),
        "new user namespaces can be created",
    ),
    "hidden_visible": (
        lambda t: _in_section(t, "hidden", "visible /root"),
        "host path /root is visible",
    ),
    "truncated": (lambda t: t.split("@end")[0], "the probe did not finish"),
    "root_writable": (
        _sub_line(r"^(@rootfs\n)readonly$", r"\g<1>writable"),
        "the root file system is writable",
    ),
}


@needs_bwrap
def test_probe_passes_on_real_sandbox_output(real_probe: tuple[str, Any, list[str]]) -> None:
    text, profile, hidden = real_probe
    assert sp.check_output(text, profile, hidden) == []


@needs_bwrap
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_probe_reports_each_broken_property(
    real_probe: tuple[str, Any, list[str]], name: str
) -> None:
    text, profile, hidden = real_probe
    mutate, expected = MUTATIONS[name]
    broken = mutate(text)
    assert broken != text
    failures = sp.check_output(broken, profile, hidden)
    assert failures, f"{name}: the probe accepted a broken sandbox"
    assert any(expected in f for f in failures), failures


# --------------------------------------------------------------- contract ---


@needs_bwrap
def test_sandbox_run_json_contract(repo: Path, state: dict[str, Path]) -> None:
    env = cli_env(state)
    code, obj = run_cli_json(
        oms("sandbox", "run", "--repo", str(repo), "--json", "--", SH, "-c",
            "echo out; echo err >&2; exit 3"),
        env,
    )  # fmt: skip
    assert code == 1  # the check ran and failed
    assert obj["exit_code"] == 3 and obj["timed_out"] is False
    assert obj["stdout"] == "out\n" and obj["stderr"] == "err\n"
    assert isinstance(obj["duration_s"], float) and 0 <= obj["duration_s"] < 10
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", obj["profile_digest"])
    code, ok = run_cli_json(oms("sandbox", "run", "--repo", str(repo), "--json", "--", "true"), env)
    assert code == 0 and ok["ok"] is True and ok["exit_code"] == 0
    for key in ("exit_code", "timed_out", "stdout", "stderr", "duration_s", "profile_digest",
                "stdout_bytes", "stderr_bytes", "commit"):  # fmt: skip
        assert key in obj and key in ok


@needs_bwrap
def test_profile_digest_is_stable_and_follows_the_limits(repo: Path) -> None:
    first = sandbox_run(repo, ["true"], None).profile_digest
    second = sandbox_run(repo, ["true"], None).profile_digest
    assert first == second
    commit_policy(repo, {"memory_mb": 512})
    lowered = sandbox_run(repo, ["true"], None).profile_digest
    assert lowered != first
    commit_policy(repo, {"memory_mb": 512, "max_procs": 64})
    assert sandbox_run(repo, ["true"], None).profile_digest not in (first, lowered)
