"""The agent profile's probe: the first process of the agent's own sandbox, a constant script.

From inside it shows: only `lo` and no route; the environment exactly the profile's;
no capabilities; no new user namespace; seccomp mode 2 and ptrace denied; the hidden
host paths absent; no host process (oms' own pid is not oms inside); the root file
system and /run/oms read-only; /workspace (unless the profile makes it read-only), /tmp
and HOME writable. It writes that report to an inherited pipe (the control fd) and waits
for "go" on a second one; meanwhile oms reads the sandbox's mountinfo and namespace ids
from outside (`--info-fd` names the pid), hashes them and checks the report. Only on
"go" does the script exec the command, in the same sandbox; EOF, anything else, a short
report or a timeout, and it exits 125 (or is killed) with the command never started.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .agent import HOME, RUN_DIR, WORKSPACE, AgentProfile
from .agent_runner import AgentResult, Launched, Mode, run_agent
from .bwrap import Bwrap
from .errors import SandboxUnavailable
from .probe import interfaces_failure, sections
from .profile import SYSTEM_DIRS
from .runner import SANDBOX_HOST_UID

PROBE_WALL_S = 30
MAX_PROCS_SEEN = 16  # bwrap, sh and the probe's own helpers; a host pid list is far longer
# The namespaces that must differ from oms' own (bwrap cannot unshare the time namespace).
UNSHARED = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
# Our own constant script (no untrusted text): prints sections the parser checks.
_SCRIPT = r"""
oms_pid=$1; py=$2; report=$3; go=$4; n=$5; shift 5
{
echo "@net"; cat /proc/net/dev
echo "@route"; tail -n +2 /proc/net/route
echo "@environ"; tr '\0' '\n' < /proc/$$/environ
echo "@caps"; grep '^Cap' /proc/self/status
echo "@limits"; grep -E '^Max (processes|open files|core file size)' /proc/self/limits
echo "@seccomp"; grep '^Seccomp:' /proc/self/status
echo "@userns"
if ! command -v unshare >/dev/null; then echo untested
elif unshare -U true 2>/dev/null; then echo allowed; else echo denied; fi
echo "@ptrace"
if [ -n "$py" ]; then "$py" -I -c 'import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(0, 0, 0, 0)
print("denied" if r == -1 and ctypes.get_errno() == 1 else "allowed")'
else echo untested; fi
echo "@hidden"
while [ "$n" -gt 0 ]; do
if [ -e "$1" ] || [ -L "$1" ]; then echo "visible $1"; fi; shift; n=$((n - 1)); done
echo "@procs"; for d in /proc/[0-9]*; do echo "${d#/proc/} $(cat "$d/comm" 2>/dev/null)"; done
echo "@omspid"; if [ -e "/proc/$oms_pid" ]; then tr '\0' ' ' < "/proc/$oms_pid/cmdline"; echo; fi
echo "@rootfs"; if (: > /.oms-probe) 2>/dev/null; then echo writable; else echo readonly; fi
echo "@runoms"
if [ ! -d /run/oms ]; then echo missing
elif (: > /run/oms/.oms-probe) 2>/dev/null; then echo writable; else echo readonly; fi
echo "@writable"
for d in /workspace /tmp /home/agent; do t="$d/.oms-probe-$$"
if mkdir "$t" 2>/dev/null && rmdir "$t"; then echo "$d yes"; else echo "$d no"; fi; done
echo "@wait"
} </dev/null >"/proc/self/fd/$report" 2>/dev/null
read -r answer <"/proc/self/fd/$go" || exit 125
[ "$answer" = go ] || exit 125
exec "$@"
"""


@dataclass(frozen=True)
class AgentProbe:
    ok: bool
    failures: tuple[str, ...]
    mountinfo_digest: str  # "sha256:..." of /proc/<pid>/mountinfo, read from outside
    namespaces_digest: str  # "sha256:..." of the sorted /proc/<pid>/ns/* ids
    duration_s: float


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_inside(text: str, profile: AgentProfile, hidden: Sequence[str]) -> list[str]:
    """The reasons the probe's output shows the profile not holding (empty: it holds)."""
    s = sections(text)
    if "wait" not in s:
        return ["the probe did not finish"]
    fails = []
    net = interfaces_failure(s.get("net", []))
    if net:
        fails.append(net)
    if s.get("route"):
        fails.append("a network route exists inside")
    want_env = {"PWD": WORKSPACE, **dict(profile.env)}  # bwrap sets PWD after --chdir
    if sorted(s.get("environ", [])) != sorted(f"{k}={v}" for k, v in want_env.items()):
        names = sorted({ln.split("=", 1)[0] for ln in s.get("environ", [])})
        fails.append(f"environment is not exactly the profile's: {names}")
    for ln in s.get("caps", []):
        name, _, mask = ln.partition(":")
        if int(mask.strip() or "0", 16) != 0:
            fails.append(f"capabilities held: {name}")
    fails.extend(_limit_failures(s.get("limits", []), profile))
    if [ln.split(":")[-1].strip() for ln in s.get("seccomp", [])] != ["2"]:
        fails.append("no seccomp filter is applied")
    if s.get("userns") not in (["denied"], ["untested"]):
        fails.append("new user namespaces can be created inside")
    if s.get("ptrace") != ["denied"]:
        fails.append(f"ptrace is not denied: {s.get('ptrace')}")
    fails.extend(f"host path {ln[8:]} is visible" for ln in s.get("hidden", []))
    fails.extend(_process_failures(s))
    if s.get("rootfs") != ["readonly"]:
        fails.append("the root file system is writable")
    if s.get("runoms") != ["readonly"]:
        fails.append(f"{RUN_DIR} is not a read-only directory: {s.get('runoms')}")
    ws = f"{WORKSPACE} {'no' if profile.workspace_readonly else 'yes'}"
    want = [ws, *(f"{d} yes" for d in ("/tmp", HOME))]  # noqa: S108 # nosec B108
    if s.get("writable") != want:
        fails.append(f"not writable inside: {s.get('writable')}")
    return fails


def _limit_failures(rows: list[str], profile: AgentProfile) -> list[str]:
    """RLIMIT_NPROC, RLIMIT_NOFILE and RLIMIT_CORE as the runner sets them (soft = hard)."""
    want = {
        "Max processes": profile.limits.max_procs,
        "Max open files": profile.limits.open_files,
        "Max core file size": 0,
    }
    seen = {}
    for row in rows:
        for name in want:
            if row.startswith(name):
                seen[name] = row[len(name) :].split()[:2]
    return [
        f"limit {name.lower()} is {seen.get(name)}, expected {value}"
        for name, value in want.items()
        if seen.get(name) != [str(value), str(value)]
    ]


def _process_failures(s: dict[str, list[str]]) -> list[str]:
    procs = s.get("procs", [])
    fails = []
    if len(procs) > MAX_PROCS_SEEN or "1 bwrap" not in procs:
        fails.append(f"host processes are visible ({len(procs)} in /proc)")
    try:
        ours = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        ours = ""
    if s.get("omspid") and s["omspid"][0].strip() == ours.strip():
        fails.append("oms' own process is visible inside")
    return fails


def _python_inside(profile: AgentProfile) -> str:
    """An interpreter the probe can use inside for ptrace: oms' own if bound, else Debian's."""
    bound = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    bound += [real for real, inside in profile.ro_paths if real == inside]
    for exe in (sys.executable, "/usr/bin/python3"):
        real = os.path.realpath(exe)
        if os.path.isfile(real) and any(real.startswith(b.rstrip("/") + "/") for b in bound):
            return real
    return ""


def _not_bind_parents(hidden: Sequence[str], profile: AgentProfile) -> list[str]:
    """`hidden` without the parents of read-only binds (e.g. /root above a pyenv): bwrap
    makes those as empty directories on the way to the bind; their contents stay hidden."""
    inside = [p for _, p in profile.ro_paths]
    return [h for h in hidden if not any(b.startswith(h.rstrip("/") + "/") for b in inside)]


def _outside(pid: int) -> tuple[str, str, list[str]]:
    """(mountinfo digest, namespaces digest, failures) read from /proc/<pid> outside."""
    try:
        mountinfo = Path(f"/proc/{pid}/mountinfo").read_bytes()
        names = sorted(os.listdir(f"/proc/{pid}/ns"))
        ns = {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in names}
        own = {n: os.readlink(f"/proc/self/ns/{n}") for n in names}
    except OSError as exc:
        return "", "", [f"cannot read the sandbox's namespaces from outside: {exc.strerror}"]
    fails = [f"the {n} namespace is the host's" for n in UNSHARED if ns.get(n) == own.get(n)]
    ids = "\n".join(ns[n] for n in names).encode()
    return _sha256(mountinfo), _sha256(ids), fails


def _read_until(fd: int, marker: bytes, deadline: float, buf: bytearray) -> bool:
    """Append what `fd` gives to `buf` until `marker` shows up (True) or EOF/deadline."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while marker not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=min(left, 0.5)):
                if left <= 0:
                    return False
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            buf += chunk
    return True


def _info_pid(run: Launched, deadline: float) -> int | None:
    buf = bytearray()
    assert run.info_fd is not None
    _read_until(run.info_fd, b"}", deadline, buf)
    try:
        pid = json.loads(bytes(buf)).get("child-pid")
    except ValueError:
        return None
    return pid if isinstance(pid, int) else None


def _report(
    run: Launched, report: int, profile: AgentProfile, hidden: Sequence[str], started: float
) -> AgentProbe:
    """Read the probe's report from the control fd and check it, with the sandbox's mountinfo
    and namespaces read from outside while the probe waits for "go"."""
    deadline = started + min(PROBE_WALL_S, profile.limits.wall_s)
    out = bytearray()
    mount_d = ns_d = ""
    fails: list[str] = []
    pid = _info_pid(run, deadline)
    if _read_until(report, b"\n@wait\n", deadline, out) and pid:
        mount_d, ns_d, fails = _outside(pid)
    else:
        fails.append("the probe did not reach its wait point")
    fails = check_inside(out.decode("utf-8", "replace"), profile, hidden) + fails
    if time.monotonic() >= deadline:
        fails.insert(0, "the probe timed out")
    duration = round(time.monotonic() - started, 3)
    return AgentProbe(not fails, tuple(fails), mount_d, ns_d, duration)


def probe_and_run(
    profile: AgentProfile,
    bw: Bwrap,
    *,
    workspace: Path,
    run_dir: Path,
    hidden: Sequence[str],
    cmd: Sequence[str],
    mode: Mode,
    on_probed: Callable[[AgentProbe], None],
    stdin: bytes | None = None,
    on_spawn: Callable[[int], None] | None = None,
) -> AgentResult:
    """`run_agent` of CMD behind the probe, in one sandbox: `on_probed` is given the checked
    probe while the probe waits; it refuses by raising (the probe gets EOF, the sandbox is
    killed, CMD never starts); when it returns, the probe execs CMD.

    `on_probed` must refuse a probe that is not ok. What it raises, raises here."""
    hidden = _not_bind_parents(hidden, profile)
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    parent_ends = {report_r, go_w}
    inherited = {report_w, go_r}  # the probe's ends: the parent's copies close at spawn
    script = ["/bin/sh", "-c", _SCRIPT, "probe", str(os.getpid()), _python_inside(profile),
              str(report_w), str(go_r), str(len(hidden)), *hidden, *cmd]  # fmt: skip

    def gate(run: Launched, started: float) -> None:
        for fd in inherited:
            os.close(fd)
        inherited.clear()
        probed = _report(run, report_r, profile, hidden, started)
        try:
            on_probed(probed)
        except BaseException:
            os.close(go_w)  # EOF: the probe exits 125 (and the sandbox is killed anyway)
            parent_ends.discard(go_w)
            raise
        try:
            os.write(go_w, b"go\n")  # a pipe's buffer takes it
        except OSError:
            raise SandboxUnavailable("the probe ended before oms handed over") from None

    try:
        try:  # the probe opens them by /proc/self/fd/N (dash takes fds 0-9 only)
            for fd in inherited if os.geteuid() == 0 else ():
                os.fchown(fd, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot hand the probe its pipes: {exc.strerror}") from None
        return run_agent(profile, bw, workspace=workspace, run_dir=run_dir, cmd=script,
                         mode=mode, pass_fds=sorted(inherited), stdin=stdin,
                         on_spawn=on_spawn, gate=gate)  # fmt: skip
    finally:
        for fd in (*parent_ends, *inherited):
            os.close(fd)


class _Refused(Exception):
    """A probe that did not hold, refused by `probe_agent` so that its command never runs."""


def probe_agent(
    profile: AgentProfile, bw: Bwrap, *, workspace: Path, run_dir: Path, hidden: Sequence[str]
) -> AgentProbe:
    """The probe alone (`true` as its command); AgentProbe.ok only if every check holds and
    the probe handed over to the command."""
    started = time.monotonic()
    seen: list[AgentProbe] = []

    def keep(probed: AgentProbe) -> None:
        seen.append(probed)
        if not probed.ok:
            raise _Refused

    try:
        result = probe_and_run(profile, bw, workspace=workspace, run_dir=run_dir,
                               hidden=hidden, cmd=["true"], mode="capture",
                               on_probed=keep)  # fmt: skip
    except _Refused:
        return seen[0]
    except SandboxUnavailable as exc:
        return AgentProbe(False, (str(exc),), "", "", round(time.monotonic() - started, 3))
    if result.exit_code != 0:
        last = (result.stderr.display() if result.stderr else "").strip().splitlines()
        failed = f"the probe exited {result.exit_code}: {last[-1] if last else ''}"
        return replace(seen[0], ok=False, failures=(failed, *seen[0].failures))
    return seen[0]
