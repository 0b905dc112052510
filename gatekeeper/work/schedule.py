"""`oms schedule install|show|remove`: exactly one user-scoped schedule.

Two jobs for one repository: `oms events sync github --dir REPO` every `[conductor]
sync_interval_s` and `oms reconcile watchdog --repo REPO` every `watchdog_interval_s`, each
started as `OMS_HOME=ROOT oms schedule run JOB --repo REPO` (the state root in use at install,
so a job under cron's bare environment finds its store and the token file in it;
`gatekeeper.work.job_log` runs the job and records it).
Where a systemd user manager runs (its private socket under `$XDG_RUNTIME_DIR`), they are
user timers: `oms-sync.{service,timer}` and `oms-watchdog.{service,timer}` in
`~/.config/systemd/user/`, then `systemctl --user daemon-reload` and `enable --now`. Else,
with `crontab` on PATH, one marked block in the user's crontab (cron's floor is a minute;
every other line is kept byte for byte). With neither, nothing is written (exit 4).

Installing the same schedule again changes nothing; `show` reads back what is installed;
`remove` removes only oms' own units or block. A unit path that is a symlink or anything
but a regular file is never followed or replaced (exit 3); the commands carry absolute
paths only and `OMS_HOME`, never a credential.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evidence.state import check_state_dirs
from gatekeeper.errors import Blocked, Unavailable, UsageError

Runner = Callable[[Sequence[str], bytes | None], tuple[int, bytes, bytes]]
Kind = Literal["systemd", "cron"]
MARK = "# managed by `oms schedule`: edit with oms schedule install|remove"
BEGIN = "# BEGIN oms schedule (managed by `oms schedule`; do not edit)"
END = "# END oms schedule"
UNITS = ("oms-sync.service", "oms-sync.timer", "oms-watchdog.service", "oms-watchdog.timer")
TIMEOUT_S = 30
RECORDS = "schedule"  # under $OMS_HOME: installed.json, and each job's JOB.log and JOB.json
INSTALLED = "installed.json"
MANAGER_UP = (b"running", b"degraded", b"starting", b"initializing", b"maintenance")


@dataclass(frozen=True)
class Job:
    """`argv`: the job's own command; `command`: what the schedule starts (`oms schedule run`,
    which runs `argv` and records it), with `OMS_HOME` set to `oms_home`."""

    name: Literal["sync", "watchdog"]
    interval_s: int
    argv: tuple[str, ...]
    command: tuple[str, ...] = ()
    oms_home: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "interval_s": self.interval_s, "argv": list(self.argv),
                "command": list(self.command), "oms_home": self.oms_home}  # fmt: skip


def _run(argv: Sequence[str], stdin: bytes | None) -> tuple[int, bytes, bytes]:
    try:
        proc = subprocess.run(list(argv), input=stdin, capture_output=True, check=False,
                              timeout=TIMEOUT_S, stdin=None if stdin is not None
                              else subprocess.DEVNULL)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, b"", str(exc).encode()
    return proc.returncode, proc.stdout, proc.stderr


@dataclass(frozen=True)
class Backend:
    """Where the schedule lives, and how its tool is run (`run`: argv, stdin -> code, out,
    err); tests give a stand-in."""

    kind: Kind
    tool: str  # the absolute path of systemctl or crontab
    run: Runner = field(default=_run)


def detect(env: Mapping[str, str] | None = None, run: Runner = _run) -> Backend | None:
    """systemd when a user manager runs here, else cron when `crontab` is on PATH, else None."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    systemctl = shutil.which("systemctl", path=env.get("PATH"))
    if systemctl and runtime and Path(runtime, "systemd", "private").exists():
        _, out, _ = run([systemctl, "--user", "is-system-running"], None)
        if out.strip() in MANAGER_UP:  # a manager answered (exit 1 also means "no bus")
            return Backend("systemd", systemctl, run)
    crontab = shutil.which("crontab", path=env.get("PATH"))
    return Backend("cron", crontab, run) if crontab else None


def oms_argv() -> tuple[str, ...]:
    """This oms, by absolute path: its `oms` script when that is what runs, else this
    interpreter with `-m gatekeeper` (never some other `oms` found on PATH)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "oms" and script.is_file():
        return (str(script.absolute()),)
    return (str(Path(sys.executable).absolute()), "-m", "gatekeeper")


def jobs(oms: Sequence[str], repo: Path, sync_s: int, watchdog_s: int,
         oms_home: Path) -> tuple[Job, Job]:  # fmt: skip
    top, home = _checked_path(repo), _checked_path(oms_home)
    for arg in oms:
        if arg.startswith("/"):
            _checked_path(Path(arg))
        else:
            _checked_word(arg)
    if not oms or not oms[0].startswith("/"):
        raise UsageError("the scheduled oms must be named by an absolute path")
    sync = Job("sync", sync_s, (*oms, "events", "sync", "github", "--dir", top),
               (*oms, "schedule", "run", "sync", "--repo", top), home)  # fmt: skip
    watchdog = Job("watchdog", watchdog_s, (*oms, "reconcile", "watchdog", "--repo", top),
                   (*oms, "schedule", "run", "watchdog", "--repo", top), home)  # fmt: skip
    return sync, watchdog


def _checked_path(path: Path) -> str:
    text = str(path)
    if not path.is_absolute() or not text.isprintable() or "\n" in text:
        raise UsageError(f"not a usable absolute path for a schedule: {text[:80]!r}")
    return text


def _checked_word(arg: str) -> str:
    if not arg or not arg.isprintable() or (arg.startswith("-") and arg != "-m"):
        raise UsageError(f"not a usable argument for a schedule: {arg[:80]!r}")
    return arg


# -- files that are only ever regular files ------------------------------------------------


def read_regular(path: Path) -> bytes | None:
    """A regular file's bytes, None when absent; Blocked for a symlink or anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise Blocked(f"{path} is not a regular file (a symlink or other); oms neither follows "
                      "nor replaces it")  # fmt: skip
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_regular(path: Path, data: bytes, mode: int = 0o644) -> None:
    """`data` at `path` by rename from a fresh file beside it (never through a link)."""
    tmp = path.with_name(f".{path.name}.oms-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        read_regular(path)  # still not a symlink: refused before the rename
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- systemd user timers -------------------------------------------------------------------


def unit_dir(home: Path) -> Path:
    return home / ".config" / "systemd" / "user"


def _exec_arg(arg: str, variables: bool = True) -> str:
    """One ExecStart word (or, without `variables`, one Environment= assignment, where `$`
    is not expanded), quoted for systemd: no specifier or variable expands in it."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped.replace("$", "$$") if variables else escaped}"'


def units(job_list: Sequence[Job]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    what = {"sync": "GitHub sync", "watchdog": "recovery watchdog"}
    for job in job_list:
        name = f"oms-{job.name}"
        out[f"{name}.service"] = "\n".join([
            MARK, "[Unit]", f"Description=oms {what[job.name]} (one-shot)", "",
            "[Service]", "Type=oneshot",
            "Environment=" + _exec_arg(f"OMS_HOME={job.oms_home}", False),
            "ExecStart=" + " ".join(_exec_arg(a) for a in job.command),
            "",
        ]).encode()  # fmt: skip
        out[f"{name}.timer"] = "\n".join([
            MARK, "[Unit]", f"Description=oms {what[job.name]} every {job.interval_s} s", "",
            "[Timer]", f"OnActiveSec={job.interval_s}s", f"OnUnitActiveSec={job.interval_s}s",
            "AccuracySec=1s", f"Unit={name}.service", "", "[Install]",
            "WantedBy=timers.target", "",
        ]).encode()  # fmt: skip
    return out


def _systemctl(backend: Backend, *args: str) -> None:
    code, _, err = backend.run([backend.tool, "--user", *args], None)
    if code != 0:
        line = err.decode("utf-8", "replace").strip().splitlines()
        raise Unavailable(f"systemctl --user {args[0]} failed: {(line or ['exit'])[0][:160]}")


def _installed_units(home: Path) -> dict[str, bytes]:
    found = {}
    for name in UNITS:
        data = read_regular(unit_dir(home) / name)
        if data is not None:
            found[name] = data
    return found


def _ours(name: str, data: bytes) -> bool:
    return data.startswith(MARK.encode() + b"\n")


# -- crontab ---------------------------------------------------------------------------------


def _cron_when(seconds: int) -> str:
    minutes = max(1, seconds // 60)
    if minutes < 60:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours = minutes // 60
    return f"0 */{hours} * * *" if hours < 24 else "0 0 * * *"


def cron_block(job_list: Sequence[Job]) -> bytes:
    lines = [BEGIN]
    for job in job_list:
        # sh runs it: OMS_HOME for this command only (a crontab's own NAME=value line would
        # reach the user's lines below it); no redirection, `schedule run` logs it.
        words = [f"OMS_HOME={shlex.quote(job.oms_home)}", *map(shlex.quote, job.command)]
        lines.append(f"{_cron_when(job.interval_s)} " + " ".join(words).replace("%", "\\%"))
    return ("\n".join([*lines, END]) + "\n").encode()


def _crontab(backend: Backend) -> bytes:
    code, out, err = backend.run([backend.tool, "-l"], None)
    if code != 0:
        if b"no crontab" in err.lower():
            return b""
        raise Unavailable(f"crontab -l failed: {err.decode('utf-8', 'replace').strip()[:160]}")
    return out


def _split(text: bytes) -> tuple[bytes, bytes | None, bytes]:
    """(before, oms' block or None, after); Blocked for a broken or doubled block."""
    begin, end = BEGIN.encode() + b"\n", END.encode() + b"\n"
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.rstrip(b"\n") == BEGIN.encode()]
    ends = [i for i, ln in enumerate(lines) if ln.rstrip(b"\n") == END.encode()]
    if not starts and not ends:
        return text, None, b""
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise Blocked("the crontab's oms block is broken or doubled; fix it by hand "
                      "(`crontab -e`), nothing changed")  # fmt: skip
    i, j = starts[0], ends[0]
    block = b"".join(lines[i : j + 1])
    if not block.endswith(b"\n"):
        block += b"\n"
    assert block.startswith(begin) and block.endswith(end)
    return b"".join(lines[:i]), block, b"".join(lines[j + 1 :])


def _set_crontab(backend: Backend, text: bytes) -> None:
    code, _, err = backend.run([backend.tool, "-"], text)
    if code != 0:
        raise Unavailable(f"crontab - failed: {err.decode('utf-8', 'replace').strip()[:160]}")


# -- what oms records under $OMS_HOME -----------------------------------------------------


def records(root: Path) -> Path:
    """`$OMS_HOME/schedule`, made (0700) and vetted as every state directory is."""
    check_state_dirs(root, RECORDS, create=True)
    return root / RECORDS


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON record oms wrote; None when absent or unreadable as one (never a symlink)."""
    if not path.parent.is_dir():
        return None
    data = read_regular(path)
    try:
        got = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    write_regular(path, (json.dumps(dict(record), sort_keys=True) + "\n").encode(), 0o600)


def installed_record(root: Path) -> dict[str, Any] | None:
    return read_record(root / RECORDS / INSTALLED)


def last_run(root: Path, job: str) -> dict[str, Any] | None:
    """The last run of `job` as `oms schedule run` recorded it; None before the first."""
    return read_record(root / RECORDS / f"{job}.json")


def _record_install(job_list: Sequence[Job], kind: Kind, action: str) -> None:
    """What doctor reads to know a schedule is due (no crontab or systemctl call there)."""
    root = Path(job_list[0].oms_home)
    path = records(root) / INSTALLED
    if action == "unchanged" and read_record(path) is not None:
        return
    write_record(path, {"version": 1, "backend": kind, "at": time.time(),
                        "repo": job_list[0].argv[-1],
                        "jobs": [{"name": j.name, "interval_s": j.interval_s}
                                 for j in job_list]})  # fmt: skip


# -- the three commands ------------------------------------------------------------------


def unavailable() -> Unavailable:
    return Unavailable("no systemd user manager runs here and there is no crontab on PATH; "
                       "nothing was written")  # fmt: skip


def install(home: Path, backend: Backend, job_list: Sequence[Job]) -> dict[str, Any]:
    """The one schedule, as `job_list`; `installed`, `updated` or `unchanged`."""
    if backend.kind == "systemd":
        want = units(job_list)
        have = _installed_units(home)  # Blocked before anything for a symlink
        for name, data in have.items():
            if not _ours(name, data):
                raise Blocked(f"{unit_dir(home) / name} is not oms' own unit; nothing changed")
        if have == want:
            action = "unchanged"
        else:
            unit_dir(home).mkdir(parents=True, exist_ok=True)
            for name, data in want.items():
                write_regular(unit_dir(home) / name, data)
            action = "updated" if have else "installed"
            _systemctl(backend, "daemon-reload")
        _systemctl(backend, "enable", "--now", "oms-sync.timer", "oms-watchdog.timer")
        where = [str(unit_dir(home) / n) for n in UNITS]
    else:
        current = _crontab(backend)
        before, block, after = _split(current)
        want_block = cron_block(job_list)
        if block == want_block:
            action = "unchanged"
        else:
            if block is None and before and not before.endswith(b"\n"):
                before += b"\n"
            _set_crontab(backend, before + want_block + after)
            action = "updated" if block is not None else "installed"
        where = ["crontab"]
    _record_install(job_list, backend.kind, action)
    return {"schedule": {"backend": backend.kind, "action": action, "where": where,
                         "jobs": [j.to_json() for j in job_list]}}  # fmt: skip


def show(home: Path, backend: Backend, root: Path) -> dict[str, Any]:
    """What is installed, read back: the units' or the block's own text; and each job's
    last run as recorded under `root` (the state root in use)."""
    if backend.kind == "systemd":
        have = _installed_units(home)
        entries = [{"file": str(unit_dir(home) / n), "ours": _ours(n, d),
                    "text": d.decode("utf-8", "replace")} for n, d in have.items()]  # fmt: skip
        installed = bool(have)
    else:
        _, block, _ = _split(_crontab(backend))
        entries = [{"file": "crontab", "ours": True, "text": block.decode("utf-8", "replace")}
                   ] if block is not None else []  # fmt: skip
        installed = block is not None
    runs = {job: last_run(root, job) for job in ("sync", "watchdog")}
    return {"schedule": {"backend": backend.kind, "installed": installed, "entries": entries,
                         "oms_home": str(root), "last_runs": runs}}  # fmt: skip


def remove(home: Path, backend: Backend, root: Path) -> dict[str, Any]:
    """oms' own units or block gone; everything else as it was. `removed` or `absent`."""
    if backend.kind == "systemd":
        have = {n: d for n, d in _installed_units(home).items() if _ours(n, d)}
        if have:
            timers = [n for n in have if n.endswith(".timer")]
            if timers:
                _systemctl(backend, "disable", "--now", *timers)
            for name in have:
                (unit_dir(home) / name).unlink()
            _systemctl(backend, "daemon-reload")
        action = "removed" if have else "absent"
    else:
        before, block, after = _split(_crontab(backend))
        if block is not None:
            _set_crontab(backend, before + after)
        action = "removed" if block is not None else "absent"
    if installed_record(root) is not None:
        (root / RECORDS / INSTALLED).unlink()
    return {"schedule": {"backend": backend.kind, "action": action}}


def for_repo(repo_dir: Path, oms_home: Path,
             oms: Sequence[str] | None = None) -> tuple[Job, Job]:  # fmt: skip
    """The two jobs for this repository, at the intervals of its default branch's policy,
    with `oms_home` (the state root in use) as their OMS_HOME."""
    from gatekeeper.gates.mark import policy_commit
    from gatekeeper.repo.git import open_repo
    from gatekeeper.repo.policy import read_policy_at

    repo = open_repo(repo_dir)
    commit = policy_commit(repo)
    cp = read_policy_at(repo, commit).policy.conductor
    return jobs(oms or oms_argv(), repo.top, cp.sync_interval_s, cp.watchdog_interval_s, oms_home)
