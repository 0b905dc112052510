"""One scheduled run, recorded where `oms schedule show` and `oms doctor` read it.

`oms schedule run JOB --repo DIR` is what the schedule starts. It runs the job's own command
(`Job.argv`, with `--json`) as a child under its time-out, then, under a lock:

- appends one entry to `$OMS_HOME/schedule/JOB.log`: start, the child's output (cut to
  ENTRY_BOUND, each line sanitised, every GitHub token value oms knows replaced), end; the
  file is then trimmed to its last LOG_BOUND bytes at a line start, and written by rename;
- writes the outcome (job, repo, started, ended, exit code, one-line error) to `JOB.json`
  by rename.

oms writes both itself: nothing in the cron line or unit redirects output, so nothing grows
without bound. The doctor warns (never "not ready") when a job's last run failed or when an
installed schedule has not run for STALE_INTERVALS of its interval.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evidence import state_root
from gatekeeper.agent.egress_config import key_file
from gatekeeper.errors import EXIT_UNAVAILABLE, OmsError
from gatekeeper.gates.doctor import Extra
from gatekeeper.repo.git import Repo
from gatekeeper.text import sanitize
from gatekeeper.work import schedule as s

LOG_BOUND = 64 << 10  # one job's log file, at most
ENTRY_BOUND = 4 << 10  # one run's output in it, at most
JOB_TIMEOUT_S = 1800  # a job past this is killed and recorded as failed
STALE_INTERVALS = 3  # a schedule that has not run for this many intervals is warned about
LOCK = ".lock"
NAME = "schedule"


@dataclass(frozen=True)
class Outcome:
    job: str
    repo: str
    started: str  # ISO 8601 UTC
    ended: str
    exit_code: int
    error: str | None  # the job's one-line refusal; None when it exited 0
    version: int = 1


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: object) -> float | None:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _secrets(env: Mapping[str, str]) -> list[str]:
    """Every GitHub token value this run could know, to be cut from what it logs."""
    # Imported here: the GitHub client (httpx) is for a job's run, not for `oms doctor`,
    # which reads this module's schedule check.
    from gatekeeper.work.github import token_file

    found = [env[n].strip() for n in ("GITHUB_TOKEN", "GH_TOKEN") if env.get(n, "").strip()]
    try:
        held = key_file(token_file(env))
    except OmsError:
        held = None  # the job itself refuses it, and says why
    return found + ([held] if held else [])


def _error(code: int, out: str, err: str) -> str | None:
    if code == 0:
        return None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:  # oms' --json object: the one line it prints
        got = json.loads(lines[-1]) if lines else None
        message = got["error"]["message"] if isinstance(got, dict) else None
    except (ValueError, KeyError, TypeError):
        message = None
    if not message:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        message = lines[-1] if lines else f"exit {code}"
    return str(message)


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def _clean(text: str, secrets: list[str], limit: int) -> str:
    return sanitize(_redact(text, secrets), limit)


def _output(text: str, secrets: list[str]) -> str:
    """The job's output for the log: tokens cut out first (so no cut leaves part of one),
    each line sanitised, then its last ENTRY_BOUND characters from a line start."""
    text = _redact(text, secrets)
    lines = "".join(sanitize(ln, ENTRY_BOUND) + "\n" for ln in text.splitlines() if ln.strip())
    if len(lines) <= ENTRY_BOUND:
        return lines
    tail = lines[-ENTRY_BOUND:]
    return "[output cut to its last lines]\n" + tail[tail.find("\n") + 1 :]


def run(job: s.Job, env: Mapping[str, str] | None = None) -> Outcome:
    """Run `job` once and record it; the outcome (its exit code is the job's)."""
    env = dict(os.environ if env is None else env)
    root = state_root(env)
    where = s.records(root)  # vetted before anything runs: a store oms cannot trust stops here
    started = time.time()
    try:
        proc = subprocess.run([*job.argv, "--json"], env=env, capture_output=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=JOB_TIMEOUT_S)  # fmt: skip
        code = proc.returncode
        out, err = (b.decode("utf-8", "replace") for b in (proc.stdout, proc.stderr))
        error = _error(code, out, err)
    except subprocess.TimeoutExpired:
        code, out, err = EXIT_UNAVAILABLE, "", ""
        error = f"timed out after {JOB_TIMEOUT_S} s and was killed"
    except OSError as exc:
        code, out, err = EXIT_UNAVAILABLE, "", ""
        error = f"could not start: {exc.strerror or exc}"
    secrets = _secrets(env)
    done = Outcome(job=job.name, repo=_clean(job.argv[-1], secrets, 300),
                   started=_iso(started), ended=_iso(time.time()), exit_code=code,
                   error=_clean(error, secrets, 300) if error else None)  # fmt: skip
    end = f"exit {code}" + (f": {done.error}" if done.error else "")
    entry = "".join([
        _clean(f"{done.started} {job.name} started: {' '.join(job.argv)}", secrets, 600) + "\n",
        _output(out + "\n" + err, secrets),
        _clean(f"{done.ended} {job.name} ended: {end}", secrets, 600) + "\n",
    ]).encode()  # fmt: skip
    with _locked(where):
        _append(where / f"{job.name}.log", entry)
        s.write_record(where / f"{job.name}.json", asdict(done))
    return done


@contextmanager
def _locked(where: Path) -> Iterator[None]:
    """One writer of the schedule's records at a time (two runs of a slow sync overlap); the
    kernel releases the flock when the holder dies."""
    fd = os.open(where / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _append(path: Path, entry: bytes) -> None:
    data = (s.read_regular(path) or b"") + entry
    if len(data) > LOG_BOUND:
        tail = data[-LOG_BOUND:]
        data = tail[tail.find(b"\n") + 1 :] if b"\n" in tail[:-1] else tail
    s.write_regular(path, data, 0o600)


# -- oms doctor ------------------------------------------------------------------------------


def warnings(root: Path, now: float) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The schedule section and its warnings: a job whose last run failed, and a job that
    has not run for STALE_INTERVALS intervals since it was installed or last ran."""
    installed = s.installed_record(root)
    if installed is None:
        return {}, ()
    said: list[str] = []
    runs = {}
    for job in installed.get("jobs") or []:
        name, every = str(job.get("name")), int(job.get("interval_s") or 60)
        last = s.last_run(root, name)
        runs[name] = last
        if last is not None and last.get("exit_code") != 0:
            why = sanitize(str(last.get("error") or "no reason recorded"), 300)
            said.append(f"the scheduled {name} failed at {last.get('started')} (exit "
                        f"{last.get('exit_code')}): {why}; see `oms schedule show` and "
                        f"{root / s.RECORDS / name}.log")  # fmt: skip
        since = max(float(installed.get("at") or 0), _epoch((last or {}).get("started")) or 0)
        overdue = STALE_INTERVALS * max(every, 60)
        if now - since > overdue:
            said.append(f"the scheduled {name} (every {every} s) has not run for "
                        f"{int(now - since)} s: is its cron or timer running? see "
                        "`oms schedule show`")  # fmt: skip
    section = {"installed": True, "backend": installed.get("backend"),
               "repo": installed.get("repo"), "last_runs": runs}  # fmt: skip
    return section, tuple(said)


def doctor_check(repo: Repo) -> Extra | None:
    del repo  # one schedule per user, whichever repository it is for
    root = state_root()
    try:
        section, said = warnings(root, time.time())
    except OmsError as exc:
        said = (f"the schedule's records are unreadable: {exc.message}",)
        return Extra(name=NAME, section={"error": exc.message}, warnings=said)
    return Extra(name=NAME, section=section, warnings=said) if section else None
