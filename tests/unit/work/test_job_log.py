"""`gatekeeper.work.job_log`: one scheduled run logged within its bound, its outcome recorded,
no token value in either; the doctor's warnings about failed and overdue jobs.

The jobs here are small `/bin/sh` scripts standing in for oms' own commands, so that a run's
output, exit code and the secret it prints are the test's to choose.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gatekeeper.errors import ConfigError
from gatekeeper.work import job_log
from gatekeeper.work import schedule as s
from gatekeeper.work.github import token_from_env

TOKEN = "ghp_schedule_token_never_logged_0123456789"


def shell_job(script: str, name: str = "sync") -> s.Job:
    # `run` appends `--json`: sh takes it as $0 and the script ignores it.
    return s.Job(name, 60, ("/bin/sh", "-c", script))  # type: ignore[arg-type]


def test_a_run_is_logged_sanitised_without_the_token_and_its_outcome_recorded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    env = {"OMS_HOME": str(root), "PATH": "/usr/bin:/bin", "GITHUB_TOKEN": TOKEN}
    script = ('echo "begin $GITHUB_TOKEN"; printf "bell \\007 here\\n"; '
              'echo "$GITHUB_TOKEN" >&2; '
              'echo \'{"ok": false, "error": {"message": "GitHub refused the token (401)"}}\'; '
              "exit 4")  # fmt: skip
    done = job_log.run(shell_job(script), env)
    assert done.exit_code == 4 and done.error == "GitHub refused the token (401)"
    log = (root / "schedule" / "sync.log").read_text()
    assert "begin [redacted]" in log and TOKEN not in log
    assert "bell \\u0007 here" in log and "\x07" not in log
    assert log.splitlines()[-1].endswith("sync ended: exit 4: GitHub refused the token (401)")
    record = json.loads((root / "schedule" / "sync.json").read_text())
    assert record == {**record, "job": "sync", "exit_code": 4, "version": 1,
                      "error": "GitHub refused the token (401)"}  # fmt: skip
    assert record["started"] <= record["ended"]
    for f in root.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f
    assert (root / "schedule" / "sync.log").stat().st_mode & 0o077 == 0


def test_output_cut_to_its_bound_keeps_no_part_of_a_token(tmp_path: Path) -> None:
    root = tmp_path / "state"
    env = {"OMS_HOME": str(root), "PATH": "/usr/bin:/bin", "GH_TOKEN": TOKEN}
    many = 'i=0; while [ $i -lt 700 ]; do printf "%s\\n" "$GH_TOKEN"; i=$((i+1)); done'
    job_log.run(shell_job(many), env)
    log = (root / "schedule" / "sync.log").read_text()
    assert "[output cut to its last lines]" in log and "[redacted]" in log
    assert TOKEN[-10:] not in log and TOKEN[:10] not in log
    assert len(log.encode()) <= job_log.ENTRY_BOUND + 2048


def test_the_log_stays_under_its_bound_and_keeps_the_newest_runs(tmp_path: Path) -> None:
    root = tmp_path / "state"
    env = {"OMS_HOME": str(root), "PATH": "/usr/bin:/bin"}
    big = "head -c 300000 /dev/zero | tr '\\0' x; echo; i=0; while [ $i -lt 3000 ]; do " \
          "echo line $i; i=$((i+1)); done"  # fmt: skip
    for n in range(3):
        job_log.run(shell_job(f"{big}; echo run {n} done"), env)
        size = (root / "schedule" / "sync.log").stat().st_size
        assert size <= job_log.LOG_BOUND
    log = (root / "schedule" / "sync.log").read_text()
    assert "run 2 done" in log and log.splitlines()[-1].endswith("sync ended: exit 0")
    assert len(log.split("sync started:")) - 1 >= 2  # one run's entry is a fraction of it
    for n in range(40):  # many small runs: the oldest go, whole lines at a time
        job_log._append(root / "schedule" / "sync.log", f"entry {n} ".encode() * 300 + b"\n")
    trimmed = (root / "schedule" / "sync.log").read_bytes()
    assert len(trimmed) <= job_log.LOG_BOUND and trimmed.startswith(b"entry ")
    assert trimmed.endswith(b"entry 39 \n")


def test_a_group_readable_or_symlinked_token_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "github").mkdir(parents=True)
    token = root / "github" / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    env = {"OMS_HOME": str(root)}
    assert token_from_env(env) == TOKEN
    token.chmod(0o640)
    with pytest.raises(ConfigError, match="readable by group or others") as refused:
        token_from_env(env)
    assert TOKEN not in str(refused.value)
    token.rename(root / "real")
    (root / "real").chmod(0o600)
    token.symlink_to(root / "real")
    with pytest.raises(ConfigError, match="symlink"):
        token_from_env(env)
    assert token_from_env({**env, "GITHUB_TOKEN": "from-env"}) == "from-env"


def test_doctor_warns_on_a_failed_run_and_on_an_overdue_schedule(tmp_path: Path) -> None:
    root = tmp_path / "state"
    env = {"OMS_HOME": str(root), "PATH": "/usr/bin:/bin"}
    assert job_log.warnings(root, time.time()) == ({}, ())  # nothing installed: no section
    jobs = s.jobs(("/usr/bin/oms",), tmp_path / "repo", 60, 900, root)
    s._record_install(jobs, "cron", "installed")
    section, said = job_log.warnings(root, time.time())
    assert section["installed"] and said == ()  # just installed: nothing is due yet
    job_log.run(shell_job('echo "boom: it broke" >&2; exit 1'), env)
    job_log.run(shell_job("exit 0", "watchdog"), env)
    section, said = job_log.warnings(root, time.time())
    assert section["last_runs"]["sync"]["exit_code"] == 1
    assert len(said) == 1 and "scheduled sync failed" in said[0] and "boom: it broke" in said[0]
    later = time.time() + 3 * 900 + 120  # three watchdog intervals with no run at all
    _, said = job_log.warnings(root, later)
    assert any("watchdog (every 900 s) has not run for" in w for w in said)
    assert any("sync (every 60 s) has not run for" in w for w in said)
