"""A scheduled sync under cron's bare environment: the installed line, run as printed with only
PATH and HOME (as cron gives), finds OMS_HOME and the token file; its failure is logged and
shown by `oms schedule show` and `oms doctor`; a group-readable token file is refused.

Stand-ins, for what cannot run here: GitHub (a GitHub-shaped loopback server,
`support.github_server`, answering 401 as GitHub does to a revoked token), a cron daemon
(`support.crontab` keeps the table in a file; the test runs the line's command with `sh -c`,
as cron does), and an installed `oms` (a script beside the table that runs this checkout
and names the loopback API root, since `env -i` drops the test's PYTHONPATH and
OMS_GITHUB_API_URL).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer
from support.crontab import fake_crontab
from support.github_server import GitHubServer, issue
from support.oms import parse_single_json

import gatekeeper
from gatekeeper.gates.records import init
from gatekeeper.work import schedule as s

TOKEN = "ghp_scheduled_token_never_shown_24680"
ISSUES = "/repos/octo/widgets/issues"


def installed_oms(bin_dir: Path, api_url: str) -> Path:
    checkout = Path(gatekeeper.__file__).resolve().parent.parent
    script = bin_dir / "oms"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nsys.path.insert(0, {str(checkout)!r})\n"
                      f"os.environ['OMS_GITHUB_API_URL'] = {api_url!r}\n"
                      "from gatekeeper.cli.main import main\nsys.exit(main())\n")  # fmt: skip
    script.chmod(0o755)
    return script


def as_cron(line: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The line's command, run as cron runs it: `sh -c` with only PATH and HOME."""
    command = line.split(maxsplit=5)[5].replace("\\%", "%")
    return subprocess.run(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", f"HOME={home}",
                           "/bin/sh", "-c", command], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_a_scheduled_sync_under_a_bare_environment_reports_its_failure(
    tmp_path: Path,
    git_repo: Path,
    oms_home: Path,
    fake_home: Path,
    oms_env: dict[str, str],
    httpserver: HTTPServer,
    run_git: Callable[..., str],
) -> None:
    init(git_repo)
    run_git(git_repo, "remote", "add", "origin", "https://github.com/octo/widgets.git")
    gh = GitHubServer(httpserver)
    gh.pages[ISSUES] = [[issue(1, "2026-01-01T00:00:00Z", ("oms:ready",))]]
    gh.fail[ISSUES] = (1, 401, {})
    bin_dir = tmp_path / "bin"
    fake_crontab(bin_dir)
    oms = installed_oms(bin_dir, gh.url)
    table = tmp_path / "crontab.txt"
    env = {
        **oms_env,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CRONTAB_FILE": str(table),
        "GITHUB_TOKEN": TOKEN,
    }  # the installer's token: never written into the schedule
    env.pop("XDG_RUNTIME_DIR", None)

    def oms_json(*args: str) -> dict[str, Any]:
        proc = subprocess.run([str(oms), *args, "--json"], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        return parse_single_json(proc)

    got = oms_json("schedule", "install", "--repo", str(git_repo))
    assert got["schedule"]["action"] == "installed", got
    sync_line = table.read_text().splitlines()[1]
    assert TOKEN not in table.read_text() and f"OMS_HOME={oms_home}" in sync_line

    (oms_home / "github").mkdir(mode=0o700)
    token = oms_home / "github" / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    ran = as_cron(sync_line, fake_home)
    assert ran.returncode == 4, (ran.stdout, ran.stderr)
    assert "GitHub refused the token (401)" in ran.stdout and TOKEN not in ran.stdout
    assert gh.requests and gh.requests[-1][3] == f"Bearer {TOKEN}"  # the file, under env -i
    log = (oms_home / "schedule" / "sync.log").read_text()
    assert "sync ended: exit 4: GitHub refused the token (401)" in log

    shown = oms_json("schedule", "show", "--repo", str(git_repo))["schedule"]
    assert shown["installed"] and shown["oms_home"] == str(oms_home)
    last = shown["last_runs"]["sync"]
    assert last["exit_code"] == 4 and last["error"] == "GitHub refused the token (401)"
    assert shown["last_runs"]["watchdog"] is None
    human = subprocess.run([str(oms), "schedule", "show"], env=env, capture_output=True,
                           text=True, timeout=120, check=False)  # fmt: skip
    assert "last sync: FAILED, exit 4 at " in human.stdout, human.stdout

    report = subprocess.run([str(oms), "doctor", "--repo", str(git_repo), "--json"], env=env,
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    doctor = parse_single_json(report)
    assert doctor["schedule"]["last_runs"]["sync"]["exit_code"] == 4
    failed = [w for w in doctor.get("warnings", []) if "scheduled sync failed" in w]
    assert failed and "GitHub refused the token (401)" in failed[0]
    assert not any("schedule" in p for p in doctor["problems"])  # a warning, not "not ready"

    token.chmod(0o640)  # group-readable: refused before any request carries it
    asked = len(gh.requests)
    refused = as_cron(sync_line, fake_home)
    assert refused.returncode == 2 and "readable by group or others" in refused.stdout
    assert len(gh.requests) == asked
    record = s.last_run(oms_home, "sync")
    assert record is not None and "readable by group or others" in str(record["error"])
    for f in oms_home.rglob("*"):
        if f.is_file() and f != token:
            assert TOKEN.encode() not in f.read_bytes(), f
