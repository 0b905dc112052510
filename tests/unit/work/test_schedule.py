"""`oms schedule`: the one user-scoped schedule, in a temporary home.

Crontab: a stand-in `crontab` script on PATH that keeps the table in a file
(`support.crontab`: this machine has no cron daemon). systemd: no user manager runs here,
so the units are written to a temporary home and a recording stand-in answers for
`systemctl --user`; the generated units are checked by the real `systemd-analyze verify` when it is
installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.crontab import fake_crontab
from support.oms import parse_single_json, run_oms

from gatekeeper.errors import Blocked
from gatekeeper.work import schedule as s

OMS = (sys.executable, "-m", "gatekeeper")
USER_LINES = b"# my own jobs\nMAILTO=me\n*/5 * * * * /usr/bin/true  # keep   this   spacing\n"


def the_jobs(repo: Path, oms_home: Path | None = None) -> tuple[s.Job, s.Job]:
    return s.jobs(OMS, repo, 60, 900, oms_home or repo.parent / "oms-state")


@pytest.fixture
def cron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[s.Backend, Path]:
    bin_dir = fake_crontab(tmp_path / "bin").parent
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("CRONTAB_FILE", str(table))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    backend = s.detect(env)
    assert backend is not None and backend.kind == "cron"
    return backend, table


def test_cron_install_is_idempotent_and_remove_keeps_the_users_lines(
    tmp_path: Path, cron: tuple[s.Backend, Path]
) -> None:
    backend, table = cron
    table.write_bytes(USER_LINES)
    repo = tmp_path / "my repo"
    got = s.install(tmp_path, backend, the_jobs(repo))["schedule"]
    assert got["action"] == "installed" and got["backend"] == "cron"
    text = table.read_bytes()
    assert text.startswith(USER_LINES)
    block = text[len(USER_LINES) :].decode()
    assert block.splitlines()[0] == s.BEGIN and block.splitlines()[-1] == s.END
    sync, watchdog = block.splitlines()[1:3]
    home = f"OMS_HOME={tmp_path / 'oms-state'}"
    assert sync.startswith(f"* * * * * {home} ") and f"run sync --repo '{repo}'" in sync
    assert watchdog.startswith(f"*/15 * * * * {home} ") and "run watchdog --repo" in watchdog
    assert ">" not in block  # no redirection: oms logs each run itself
    assert s.install(tmp_path, backend, the_jobs(repo))["schedule"]["action"] == "unchanged"
    assert table.read_bytes() == text
    shown = s.show(tmp_path, backend, tmp_path / "oms-state")["schedule"]
    assert shown["installed"] and shown["entries"][0]["text"] == block
    assert shown["last_runs"] == {"sync": None, "watchdog": None}
    # another repository: still exactly one block
    assert s.install(tmp_path, backend, the_jobs(tmp_path / "b"))["schedule"]["action"] == "updated"
    assert table.read_bytes().count(s.BEGIN.encode()) == 1
    assert s.installed_record(tmp_path / "oms-state") is not None
    assert s.remove(tmp_path, backend, tmp_path / "oms-state")["schedule"]["action"] == "removed"
    assert table.read_bytes() == USER_LINES
    assert s.installed_record(tmp_path / "oms-state") is None
    assert s.remove(tmp_path, backend, tmp_path / "oms-state")["schedule"]["action"] == "absent"
    assert not s.show(tmp_path, backend, tmp_path / "oms-state")["schedule"]["installed"]


OLD_BLOCK = (  # what `oms schedule install` wrote before jobs carried OMS_HOME and logged
    f"{s.BEGIN}\n* * * * * {sys.executable} -m gatekeeper events sync github --dir /r "
    f">/dev/null 2>&1\n*/15 * * * * {sys.executable} -m gatekeeper reconcile watchdog "
    f"--repo /r >/dev/null 2>&1\n{s.END}\n"
)


def test_an_older_block_without_oms_home_is_updated_not_unchanged(
    tmp_path: Path, cron: tuple[s.Backend, Path]
) -> None:
    backend, table = cron
    table.write_bytes(USER_LINES + OLD_BLOCK.encode())
    got = s.install(tmp_path, backend, the_jobs(Path("/r"), tmp_path / "oms-state"))["schedule"]
    assert got["action"] == "updated"
    text = table.read_text()
    assert text.startswith(USER_LINES.decode()) and ">/dev/null" not in text
    assert text.count("OMS_HOME=") == 2 and text.count(s.BEGIN) == 1


def test_cron_without_a_crontab_yet_and_a_broken_block(
    tmp_path: Path, cron: tuple[s.Backend, Path]
) -> None:
    backend, table = cron
    assert s.install(tmp_path, backend, the_jobs(tmp_path))["schedule"]["action"] == "installed"
    assert table.read_bytes().startswith(s.BEGIN.encode())
    broken = USER_LINES + s.BEGIN.encode() + b"\n* * * * * /bin/true\n"
    table.write_bytes(broken)
    with pytest.raises(Blocked, match="broken"):
        s.install(tmp_path, backend, the_jobs(tmp_path))
    with pytest.raises(Blocked, match="broken"):
        s.remove(tmp_path, backend, tmp_path / "oms-state")
    assert table.read_bytes() == broken


class Systemctl:
    """Answers `systemctl --user ...` as a running user manager would; records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], stdin: bytes | None) -> tuple[int, bytes, bytes]:
        self.calls.append(tuple(argv[1:]))
        return 0, b"running\n", b""


@pytest.fixture
def systemd(tmp_path: Path) -> tuple[s.Backend, Systemctl]:
    runtime = tmp_path / "run"
    (runtime / "systemd").mkdir(parents=True)
    (runtime / "systemd" / "private").touch()
    fake = Systemctl()
    if shutil.which("systemctl") is None:
        pytest.skip("no systemctl on this machine: systemd detection cannot be exercised")
    backend = s.detect({"XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}, fake)
    assert backend is not None and backend.kind == "systemd"
    fake.calls.clear()
    return backend, fake


def test_systemd_units_are_written_enabled_idempotent_and_removed_alone(
    tmp_path: Path, systemd: tuple[s.Backend, Systemctl]
) -> None:
    backend, fake = systemd
    home = tmp_path / "home"
    unit_dir = s.unit_dir(home)
    got = s.install(home, backend, the_jobs(tmp_path / "repo"))["schedule"]
    assert got["action"] == "installed"
    assert sorted(p.name for p in unit_dir.iterdir()) == sorted(s.UNITS)
    service = (unit_dir / "oms-sync.service").read_text()
    assert f'ExecStart="{sys.executable}" "-m" "gatekeeper" "schedule" "run" "sync" "--repo"' \
        in service  # fmt: skip
    assert f'Environment="OMS_HOME={tmp_path / "oms-state"}"' in service
    assert "OnUnitActiveSec=900s" in (unit_dir / "oms-watchdog.timer").read_text()
    enable = ("--user", "enable", "--now", "oms-sync.timer", "oms-watchdog.timer")
    assert fake.calls == [("--user", "daemon-reload"), enable]
    fake.calls.clear()
    files = {p.name: p.read_bytes() for p in unit_dir.iterdir()}
    assert (
        s.install(home, backend, the_jobs(tmp_path / "repo"))["schedule"]["action"] == "unchanged"
    )
    assert {p.name: p.read_bytes() for p in unit_dir.iterdir()} == files
    assert ("--user", "daemon-reload") not in fake.calls
    shown = s.show(home, backend, tmp_path / "oms-state")["schedule"]
    assert shown["installed"] and {e["text"] for e in shown["entries"]} == {
        v.decode() for v in files.values()
    }
    (unit_dir / "mine.service").write_text("[Service]\nExecStart=/bin/true\n")
    assert s.remove(home, backend, tmp_path / "oms-state")["schedule"]["action"] == "removed"
    assert [p.name for p in unit_dir.iterdir()] == ["mine.service"]
    assert ("--user", "disable", "--now", "oms-sync.timer", "oms-watchdog.timer") in fake.calls


def test_a_symlink_at_a_unit_path_is_neither_followed_nor_replaced(
    tmp_path: Path, systemd: tuple[s.Backend, Systemctl]
) -> None:
    backend, fake = systemd
    home = tmp_path / "home"
    unit_dir = s.unit_dir(home)
    unit_dir.mkdir(parents=True)
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n")
    (unit_dir / "oms-sync.timer").symlink_to(target)
    with pytest.raises(Blocked, match="not a regular file"):
        s.install(home, backend, the_jobs(tmp_path))
    assert target.read_text() == "precious\n" and (unit_dir / "oms-sync.timer").is_symlink()
    assert [p.name for p in unit_dir.iterdir()] == ["oms-sync.timer"] and fake.calls == []


def test_the_generated_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the units cannot be verified here")
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for name, data in s.units(the_jobs(tmp_path / "a repo %h $HOME", tmp_path / "s %h $H")).items():
        (unit_dir / name).write_bytes(data)
    proc = subprocess.run([analyze, "verify", "--man=no", *sorted(map(str, unit_dir.iterdir()))],
                          capture_output=True, text=True, check=False, cwd=unit_dir,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})  # fmt: skip
    problems = [ln for ln in proc.stderr.splitlines() if "oms-" in ln]
    assert proc.returncode == 0 and problems == [], proc.stderr


def test_with_neither_backend_install_writes_nothing_and_exits_4(
    tmp_path: Path, oms_env: dict[str, str], fake_home: Path, git_repo: Path
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {k: v for k, v in oms_env.items() if k != "XDG_RUNTIME_DIR"}
    env["PATH"] = str(empty)
    proc = run_oms(["schedule", "install", "--repo", str(git_repo), "--json"], env=env)
    data = parse_single_json(proc)
    assert proc.returncode == 4 and data["oms_exit_code"] == 4
    assert "nothing was written" in data["error"]["message"]
    assert not (fake_home / ".config").exists()


def test_the_install_command_with_a_crontab_prints_one_json_object(
    tmp_path: Path, oms_env: dict[str, str], git_repo: Path, cron: tuple[s.Backend, Path]
) -> None:
    _, table = cron
    env = {**oms_env, "PATH": f"{tmp_path / 'bin'}:{oms_env['PATH']}", "CRONTAB_FILE": str(table)}
    env.pop("XDG_RUNTIME_DIR", None)
    proc = run_oms(["schedule", "install", "--repo", str(git_repo), "--json"], env=env)
    got = parse_single_json(proc)["schedule"]
    assert proc.returncode == 0 and got["backend"] == "cron" and got["action"] == "installed"
    assert [j["interval_s"] for j in got["jobs"]] == [60, 900]
    assert got["jobs"][0]["argv"][-2:] == ["--dir", str(git_repo.resolve())]
    assert got["jobs"][0]["command"][-4:] == ["run", "sync", "--repo", str(git_repo.resolve())]
    assert got["jobs"][0]["oms_home"] == oms_env["OMS_HOME"]
    assert f"run sync --repo {git_repo.resolve()}" in table.read_text()


def test_a_socket_without_a_manager_answering_is_not_a_systemd_backend(tmp_path: Path) -> None:
    (tmp_path / "run" / "systemd").mkdir(parents=True)
    (tmp_path / "run" / "systemd" / "private").touch()
    calls: list[Sequence[str]] = []

    def no_bus(argv: Sequence[str], stdin: bytes | None) -> tuple[int, bytes, bytes]:
        calls.append(argv)
        return 1, b"", b"Failed to connect to bus: No medium found\n"

    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run"), "PATH": "/usr/bin:/bin"}
    if shutil.which("systemctl", path=env["PATH"]) is None:
        pytest.skip("no systemctl on this machine: systemd detection cannot be exercised")
    found = s.detect(env, no_bus)
    assert calls and (found is None or found.kind == "cron")
