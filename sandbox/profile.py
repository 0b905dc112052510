"""The `check` profile and the bwrap argv it becomes.

Everything a check can see is listed here: system directories read-only, a few
files from /etc, a minimal /dev and /proc, size-capped tmpfs for /tmp and HOME,
the scratch copy read-write at /workspace, toolchain paths from policy
read-only, and (for a `command` toolchain's build only) `rw_paths` read-write at
their own path. The root itself (bwrap's own tmpfs) is remounted read-only last,
so nothing outside the capped mounts, the rw_paths and /workspace is writable. Never bound: the
real repository, $HOME, $OMS_HOME, /root, /run, $XDG_RUNTIME_DIR, or any
socket (a toolchain path holding one is refused). The argv is always a list.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from policy import SandboxPolicy

from .bwrap import Bwrap
from .errors import ProfileError
from .quiet_dirs import QuietDirs

PROFILE_VERSION = 2
WORKDIR = "/workspace"
HOME = "/home/sandbox"
INSIDE_UID = 1000
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# System directories, bound read-only when present (merged-/usr symlinks kept as symlinks).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what programs need from /etc: no shadow, no host passwd (a synthetic one is bound).
ETC_ENTRIES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "alternatives",
    "ssl", "ca-certificates", "ca-certificates.conf", "localtime", "timezone",
    "os-release", "debian_version", "lsb-release", "mime.types", "protocols", "services",
    "host.conf", "gai.conf", "bash.bashrc", "profile", "inputrc", "magic", "magic.mime",
)  # fmt: skip
ETC_GLOBS = ("/etc/python3*", "/etc/perl", "/etc/java-*")
# Copied from the host when set; everything else in the host environment stays out.
PASSTHROUGH_ENV = ("LANG", "TZ", "CI")
# Host paths that a toolchain path may never be, contain, or (for secrets) sit inside.
SECRET_HOME_DIRS = (".ssh", ".gnupg", ".aws", ".config", ".docker", ".kube", ".netrc",
                    ".pypirc", ".npmrc", ".git-credentials", ".local/state")  # fmt: skip
# Entries of one toolchain path walked to look for sockets; a larger one is refused.
MAX_RO_ENTRIES = 1_000_000


@dataclass(frozen=True)
class Limits:
    wall_s: int
    cpu_s: int
    memory_mb: int
    max_procs: int
    file_size_mb: int
    open_files: int
    tmpfs_mb: int
    output_bytes: int


@dataclass(frozen=True)
class Profile:
    """A resolved sandbox profile: what is bound, which env names, which limits."""

    name: str
    limits: Limits
    ro_paths: tuple[tuple[str, str], ...]  # (host real path, path inside)
    env: tuple[tuple[str, str], ...] = field(default=())
    # (host real path, path inside), read-write: a `command` toolchain's destination
    rw_paths: tuple[tuple[str, str], ...] = field(default=())

    def canonical(self) -> dict[str, Any]:
        """Binds, limits and env *names* (values can be host-specific, never secrets).
        `rw_paths` only when there are some: every other profile's digest stays as it was."""
        doc: dict[str, Any] = {
            "version": PROFILE_VERSION,
            "name": self.name,
            "system": [p for p in SYSTEM_DIRS if os.path.lexists(p)],
            "etc": sorted(etc_entries()),
            "ro_paths": [list(p) for p in self.ro_paths],
            "workdir": WORKDIR,
            "home": HOME,
            "env_names": sorted(name for name, _ in self.env),
            "limits": asdict(self.limits),
            "unshare": ["user", "ipc", "pid", "net", "uts", "cgroup"],
            "flags": ["die-with-parent", "new-session", "clearenv", "disable-userns"],
            "dev": {"shm_tmpfs": True, "readonly": True},
            "root": {"readonly": True},
        }
        if self.rw_paths:
            doc["rw_paths"] = [list(p) for p in self.rw_paths]
        return doc

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(rfc8785.dumps(self.canonical())).hexdigest()


def etc_entries() -> list[str]:
    """The host /etc entries every profile binds read-only (the curated list, globs expanded)."""
    found = [f"/etc/{e}" for e in ETC_ENTRIES if os.path.lexists(f"/etc/{e}")]
    for pattern in ETC_GLOBS:
        found.extend(sorted(glob.glob(pattern)))
    return found


def _is_within(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def forbidden_roots(environ: Mapping[str, str], extra: Sequence[Path] = ()) -> list[Path]:
    """Host paths that must never be visible inside (nor any path containing them)."""
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    paths = [home, Path("/root"), Path("/run"), Path("/home"), Path("/var/run")]
    if environ.get("XDG_RUNTIME_DIR"):
        paths.append(Path(environ["XDG_RUNTIME_DIR"]))
    paths.extend(extra)
    return [Path(os.path.realpath(p)) for p in paths]


def resolve_ro_paths(
    paths: Sequence[str],
    environ: Mapping[str, str],
    never: Sequence[Path],
    *,
    masked: Collection[str] = (),
    quiet: QuietDirs | None = None,
) -> tuple[tuple[str, str], ...]:
    """Check policy `ro_paths`: each must exist and must not expose a forbidden path.

    `masked`: real paths below a ro_path that the profile covers with an empty tmpfs (so
    nothing below them is visible, and they are not walked for sockets). `quiet`: walks
    remembered from earlier runs, which spare the walk of a path whose directories did not
    change (`sandbox/quiet_dirs.py`), and where this one's are remembered.

    A toolchain below $HOME or /root (a pyenv, a venv) is allowed, but never one that
    contains $HOME, /root, /run, $OMS_HOME or the repository, nor one inside
    $OMS_HOME, the repository or a secrets folder such as ~/.ssh. As root, one the
    sandbox uid cannot reach is staged by the runner (`staging.py`).
    """
    check = _path_checker(environ, never)
    out = []
    for given in paths:
        real = check(given, "ro_path")
        key = QuietDirs.key(real, masked)
        if quiet is None or not quiet.covers(key):
            listed: dict[str, os.stat_result] = {}
            started = time.time_ns()
            _refuse_sockets(real, f"sandbox ro_path {given}", frozenset(masked), listed)
            if quiet is not None:
                quiet.remember(key, listed, started)
        out.append((str(real), given))
    if quiet is not None:
        quiet.save()
    return tuple(out)


def resolve_rw_paths(
    paths: Sequence[str], environ: Mapping[str, str], never: Sequence[Path]
) -> tuple[tuple[str, str], ...]:
    """Check read-write paths (a `command` toolchain's destination, written at its own
    absolute path): each must be an existing directory, absolute, outside /workspace,
    holding no unix socket, and pass every rule `resolve_ro_paths` applies."""
    check = _path_checker(environ, never)
    out = []
    for given in paths:
        if not os.path.isabs(given) or _is_within(Path(given), Path(WORKDIR)):
            raise ProfileError(f"sandbox rw_path {given} must be absolute and not in {WORKDIR}")
        real = check(given, "rw_path")
        if not real.is_dir():
            raise ProfileError(f"sandbox rw_path {given} is not a directory")
        _refuse_sockets(real, f"sandbox rw_path {given}")
        out.append((str(real), given))
    return tuple(out)


def _path_checker(environ: Mapping[str, str], never: Sequence[Path]) -> Callable[[str, str], Path]:
    """A check of one bound path (its real path, or ProfileError naming `kind`): it exists,
    contains no forbidden root and lies in neither a `never` path nor a secrets folder."""
    roots = forbidden_roots(environ)
    home = Path(os.path.realpath(environ.get("HOME") or os.path.expanduser("~")))
    secrets = [home / d for d in SECRET_HOME_DIRS] + [Path("/root") / d for d in SECRET_HOME_DIRS]
    never_real = [Path(os.path.realpath(p)) for p in never]

    def check(given: str, kind: str) -> Path:
        real = Path(os.path.realpath(given))
        if not real.exists():
            raise ProfileError(f"sandbox {kind} does not exist: {given}")
        for bad in [*roots, *never_real]:
            if _is_within(bad, real):
                raise ProfileError(f"sandbox {kind} {given} would expose {bad}")
        for bad in [*never_real, *secrets]:
            if _is_within(real, bad):
                raise ProfileError(f"sandbox {kind} {given} lies inside {bad}")
        return real

    return check


def _refuse_sockets(real: Path, label: str, masked: frozenset[str] = frozenset(),
                    listed: dict[str, os.stat_result] | None = None) -> None:  # fmt: skip
    """A unix socket below a bound path would let a check talk to whatever listens on it.
    `label` names the path in messages, e.g. "sandbox ro_path /opt/tc"; `listed` gets the
    lstat of each directory listed."""
    stack, seen = [str(real)], 0
    while stack:
        top = stack.pop()
        if top in masked:
            continue
        try:
            st = os.lstat(top)
        except OSError as exc:
            raise ProfileError(f"{label}: cannot read {top}: {exc.strerror}") from None
        if stat.S_ISSOCK(st.st_mode):
            raise ProfileError(f"{label} holds a unix socket: {top}")
        if not stat.S_ISDIR(st.st_mode):
            continue
        if listed is not None:
            listed[top] = st
        try:
            with os.scandir(top) as it:
                for entry in it:  # lstat only: symlinks are never followed
                    seen += 1
                    if seen > MAX_RO_ENTRIES:
                        raise ProfileError(
                            f"{label} has more than {MAX_RO_ENTRIES} entries "
                            "to check for sockets; name a smaller directory"
                        )
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif not entry.is_file(follow_symlinks=False) and stat.S_ISSOCK(
                        entry.stat(follow_symlinks=False).st_mode
                    ):
                        raise ProfileError(f"{label} holds a unix socket: {entry.path}")
        except OSError as exc:  # unreadable: it cannot be shown to hold no socket
            raise ProfileError(f"{label}: cannot read {top}: {exc.strerror}") from None


def check_profile(
    policy: SandboxPolicy,
    environ: Mapping[str, str] | None = None,
    never: Sequence[Path] = (),
    timeout_s: int | None = None,
    *,
    rw_paths: Sequence[str] = (),
) -> Profile:
    """The `check` profile for a policy. `never`: paths to refuse ($OMS_HOME, the repo);
    `rw_paths`: directories bound read-write at their own path (`resolve_rw_paths`)."""
    env_in = os.environ if environ is None else environ
    wall = policy.wall_s if timeout_s is None else min(policy.wall_s, timeout_s)
    limits = Limits(
        wall_s=wall,
        cpu_s=policy.cpu_s,
        memory_mb=policy.memory_mb,
        max_procs=policy.max_procs,
        file_size_mb=policy.file_size_mb,
        open_files=policy.open_files,
        tmpfs_mb=policy.tmpfs_mb,
        output_bytes=policy.output_bytes,
    )
    env = {"PATH": SANDBOX_PATH, "HOME": HOME, "LANG": "C.UTF-8", "TZ": "UTC"}
    for name in (*PASSTHROUGH_ENV, *policy.env_allow):
        if name in env_in and name not in ("PATH", "HOME"):
            env[name] = env_in[name]
    return Profile(
        name="check",
        limits=limits,
        ro_paths=resolve_ro_paths(policy.ro_paths, env_in, never),
        env=tuple(sorted(env.items())),
        rw_paths=resolve_rw_paths(rw_paths, env_in, never),
    )


def system_mounts(etc_dir: Path, tmpfs_mb: int) -> list[str]:
    """bwrap args shared by every profile: system dirs and the curated /etc read-only, the
    synthetic passwd/group from `etc_dir`, fresh /proc, a read-only minimal /dev with a
    capped /dev/shm, and a capped /tmp."""
    tmpfs_bytes = str(tmpfs_mb * 1024 * 1024)
    argv: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for e in etc_entries():
        argv += ["--ro-bind", e, e]
    argv += ["--ro-bind", str(etc_dir / "passwd"), "/etc/passwd"]
    argv += ["--ro-bind", str(etc_dir / "group"), "/etc/group"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # bwrap's /dev is a writable tmpfs of half the host RAM: cap /dev/shm, freeze the rest.
    argv += ["--size", tmpfs_bytes, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]  # noqa: S108 # nosec B108
    argv += ["--size", tmpfs_bytes, "--tmpfs", "/tmp"]  # noqa: S108 # nosec B108
    return argv


def build_argv(
    profile: Profile,
    bw: Bwrap,
    scratch: Path,
    etc_dir: Path,
    cmd: Sequence[str],
    ro_fds: Sequence[int] = (),
    status_fd: int | None = None,
    rw_fds: Sequence[int] = (),
) -> list[str]:
    """The full bwrap argv. `etc_dir` holds the synthetic passwd and group files.

    `ro_fds` and `rw_fds` are O_PATH descriptors of `profile.ro_paths` and
    `profile.rw_paths`, opened by oms (re-pointed at a staged copy where the sandbox uid
    cannot reach the path: `staging.py`): bwrap binds exactly what was checked.
    `status_fd` receives bwrap's JSON status (an `exit-code` document only once the
    command ran).
    """
    if not cmd:
        raise ProfileError("no command to run")
    tmpfs_bytes = str(profile.limits.tmpfs_mb * 1024 * 1024)
    argv = [bw.path, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--disable-userns",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID)]  # fmt: skip
    if bw.has("--cap-drop"):
        argv += ["--cap-drop", "ALL"]
    argv += system_mounts(etc_dir, profile.limits.tmpfs_mb)
    argv += ["--size", tmpfs_bytes, "--tmpfs", HOME]
    # Toolchains after the tmpfs mounts, so that one below /tmp is not hidden by them.
    if len(ro_fds) != len(profile.ro_paths) or len(rw_fds) != len(profile.rw_paths):
        raise ProfileError("toolchain paths were not opened")
    for fd, (_, inside) in zip(ro_fds, profile.ro_paths, strict=True):
        argv += ["--ro-bind-fd", str(fd), inside]
    for fd, (_, inside) in zip(rw_fds, profile.rw_paths, strict=True):
        argv += ["--bind-fd", str(fd), inside]
    argv += ["--bind", str(scratch), WORKDIR, "--chdir", WORKDIR]
    # Last mount operation: bwrap's root tmpfs (uncapped) becomes read-only.
    argv += ["--remount-ro", "/"]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    argv += ["--clearenv"]
    for name, value in profile.env:
        argv += ["--setenv", name, value]
    argv += ["--", *cmd]
    return argv
