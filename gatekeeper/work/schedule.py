"""`oms schedule install|show|remove`: exactly one user-scoped schedule.

Two jobs for one repository: `oms events sync github --dir REPO` every `[conductor]
sync_interval_s` and `oms reconcile watchdog --repo REPO` every `watchdog_interval_s`.
Where a systemd user manager runs (its private socket under `$XDG_RUNTIME_DIR`), they are
user timers: `oms-sync.{service,timer}` and `oms-watchdog.{service,timer}` in
`~/.config/systemd/user/`, then `systemctl --user daemon-reload` and `enable --now`. Else,
with `crontab` on PATH, one marked block in the user's crontab (cron's floor is a minute;
every other line is kept byte for byte). With neither, nothing is written (exit 4).

Installing the same schedule again changes nothing; `show` reads back what is installed;
`remove` removes only oms' own units or block. A unit path that is a symlink or anything
but a regular file is never followed or replaced (exit 3); the commands carry absolute
paths only, no credential and no environment.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gatekeeper.errors import Blocked, Unavailable, UsageError

Runner = Callable[[Sequence[str], bytes | None], tuple[int, bytes, bytes]]
Kind = Literal["systemd", "cron"]
MARK = "# managed by `oms schedule`: edit with oms schedule install|remove"
BEGIN = "# BEGIN oms schedule (managed by `oms schedule`; do not edit)"
END = "# END oms schedule"
UNITS = ("oms-sync.service", "oms-sync.timer", "oms-watchdog.service", "oms-watchdog.timer")
TIMEOUT_S = 30
MANAGER_UP = (b"running", b"degraded", b"starting", b"initializing", b"maintenance")


@dataclass(frozen=True)
class Job:
    name: Literal["sync", "watchdog"]
    interval_s: int
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "interval_s": self.interval_s, "argv": list(self.argv)}


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


def jobs(oms: Sequence[str], repo: Path, sync_s: int, watchdog_s: int) -> tuple[Job, Job]:
    top = _checked_path(repo)
    for arg in oms:
        if arg.startswith("/"):
            _checked_path(Path(arg))
        else:
            _checked_word(arg)
    if not oms or not oms[0].startswith("/"):
        raise UsageError("the scheduled oms must be named by an absolute path")
    sync = Job("sync", sync_s, (*oms, "events", "sync", "github", "--dir", top))
    return sync, Job("watchdog", watchdog_s, (*oms, "reconcile", "watchdog", "--repo", top))


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


def _read(path: Path) -> bytes | None:
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


def _write(path: Path, data: bytes) -> None:
    """`data` at `path` by rename from a fresh file beside it (never through a link)."""
    tmp = path.with_name(f".{path.name}.oms-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        _read(path)  # still not a symlink: refused before the rename
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- systemd user timers -------------------------------------------------------------------


def unit_dir(home: Path) -> Path:
    return home / ".config" / "systemd" / "user"


def _exec_arg(arg: str) -> str:
    """One ExecStart word, quoted for systemd: no specifier or variable expands in it."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def units(job_list: Sequence[Job]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    what = {"sync": "GitHub sync", "watchdog": "recovery watchdog"}
    for job in job_list:
        name = f"oms-{job.name}"
        out[f"{name}.service"] = "\n".join([
            MARK, "[Unit]", f"Description=oms {what[job.name]} (one-shot)", "",
            "[Service]", "Type=oneshot", "ExecStart=" + " ".join(_exec_arg(a) for a in job.argv),
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
        data = _read(unit_dir(home) / name)
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
        command = " ".join(shlex.quote(a) for a in job.argv).replace("%", "\\%")
        lines.append(f"{_cron_when(job.interval_s)} {command} >/dev/null 2>&1")
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
                _write(unit_dir(home) / name, data)
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
    return {"schedule": {"backend": backend.kind, "action": action, "where": where,
                         "jobs": [j.to_json() for j in job_list]}}  # fmt: skip


def show(home: Path, backend: Backend) -> dict[str, Any]:
    """What is installed, read back: the units' or the block's own text."""
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
    return {"schedule": {"backend": backend.kind, "installed": installed, "entries": entries}}


def remove(home: Path, backend: Backend) -> dict[str, Any]:
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
    return {"schedule": {"backend": backend.kind, "action": action}}


def for_repo(repo_dir: Path, oms: Sequence[str] | None = None) -> tuple[Job, Job]:
    """The two jobs for this repository, at the intervals of its default branch's policy."""
    from gatekeeper.gates.mark import policy_commit
    from gatekeeper.repo.git import open_repo
    from gatekeeper.repo.policy import read_policy_at

    repo = open_repo(repo_dir)
    commit = policy_commit(repo)
    cp = read_policy_at(repo, commit).policy.conductor
    return jobs(oms or oms_argv(), repo.top, cp.sync_interval_s, cp.watchdog_interval_s)
