"""The `check` profile and the bwrap argv it becomes.

Everything a check can see is listed here: system directories read-only, a few
files from /etc, a minimal /dev and /proc, size-capped tmpfs for /tmp and HOME,
the scratch copy read-write at /workspace, and toolchain paths from policy
read-only. The root itself (bwrap's own tmpfs) is remounted read-only last, so
nothing outside the capped mounts and /workspace is writable. Never bound: the
real repository, $HOME, $OMS_HOME, /root, /run, $XDG_RUNTIME_DIR, or any
socket (a toolchain path holding one is refused). The argv is always a list.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from policy import SandboxPolicy

from .bwrap import Bwrap
from .errors import ProfileError

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

    def canonical(self) -> dict[str, Any]:
        """Binds, limits and env *names* (values can be host-specific, never secrets)."""
        return {
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
    staged: bool = False,
    masked: Collection[str] = (),
) -> tuple[tuple[str, str], ...]:
    """Check policy `ro_paths`: each must exist and must not expose a forbidden path.

    `masked`: real paths below a ro_path that the profile covers with an empty tmpfs (so
    nothing below them is visible, and they are not walked for sockets).

    A toolchain below $HOME or /root (a pyenv, a venv) is allowed, but never one that
    contains $HOME, /root, /run, $OMS_HOME or the repository, nor one inside
    $OMS_HOME, the repository or a secrets folder such as ~/.ssh.
    """
    roots = forbidden_roots(environ)
    home = Path(os.path.realpath(environ.get("HOME") or os.path.expanduser("~")))
    secrets = [home / d for d in SECRET_HOME_DIRS] + [Path("/root") / d for d in SECRET_HOME_DIRS]
    never_real = [Path(os.path.realpath(p)) for p in never]
    out = []
    for given in paths:
        real = Path(os.path.realpath(given))
        if not real.exists():
            raise ProfileError(f"sandbox ro_path does not exist: {given}")
        for bad in [*roots, *never_real]:
            if _is_within(bad, real):
                raise ProfileError(f"sandbox ro_path {given} would expose {bad}")
        for bad in [*never_real, *secrets]:
            if _is_within(real, bad):
                raise ProfileError(f"sandbox ro_path {given} lies inside {bad}")
        if os.geteuid() == 0 and not staged:  # the agent runner stages what others cannot reach
            _check_reachable(real, given)
        _refuse_sockets(real, given, frozenset(masked))
        out.append((str(real), given))
    return tuple(out)


def _refuse_sockets(real: Path, given: str, masked: frozenset[str] = frozenset()) -> None:
    """A unix socket below a toolchain path would let a check talk to whatever listens on it."""
    stack, seen = [str(real)], 0
    while stack:
        top = stack.pop()
        if top in masked:
            continue
        try:
            mode = os.lstat(top).st_mode
        except OSError as exc:
            raise ProfileError(
                f"sandbox ro_path {given}: cannot read {top}: {exc.strerror}"
            ) from None
        if stat.S_ISSOCK(mode):
            raise ProfileError(f"sandbox ro_path {given} holds a unix socket: {top}")
        if not stat.S_ISDIR(mode):
            continue
        try:
            with os.scandir(top) as it:
                for entry in it:  # lstat only: symlinks are never followed
                    seen += 1
                    if seen > MAX_RO_ENTRIES:
                        raise ProfileError(
                            f"sandbox ro_path {given} has more than {MAX_RO_ENTRIES} entries "
                            "to check for sockets; name a smaller directory"
                        )
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif not entry.is_file(follow_symlinks=False) and stat.S_ISSOCK(
                        entry.stat(follow_symlinks=False).st_mode
                    ):
                        raise ProfileError(
                            f"sandbox ro_path {given} holds a unix socket: {entry.path}"
                        )
        except OSError as exc:  # unreadable: it cannot be shown to hold no socket
            raise ProfileError(
                f"sandbox ro_path {given}: cannot read {top}: {exc.strerror}"
            ) from None


def unreachable_dir(real: Path) -> Path | None:
    """The first directory on the way to `real` that other users cannot search, if any."""
    for d in [*reversed(real.parents), real]:
        if d.is_dir() and not d.stat().st_mode & 0o001:
            return d
    return None


def _check_reachable(real: Path, given: str) -> None:
    """As root the sandbox runs as an unprivileged uid, which must be able to reach the path."""
    d = unreachable_dir(real)
    if d is not None:
        raise ProfileError(
            f"sandbox ro_path {given} is not reachable by the sandbox user: {d} is not "
            "searchable by others (oms runs checks as an unprivileged uid when run as "
            "root); install the toolchain where other users can read it, e.g. /opt"
        )


def check_profile(
    policy: SandboxPolicy,
    environ: Mapping[str, str] | None = None,
    never: Sequence[Path] = (),
    timeout_s: int | None = None,
) -> Profile:
    """The `check` profile for a policy. `never`: paths to refuse ($OMS_HOME, the repo)."""
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
) -> list[str]:
    """The full bwrap argv. `etc_dir` holds the synthetic passwd and group files.

    `ro_fds` are O_PATH descriptors of `profile.ro_paths`, opened by oms: bwrap binds
    exactly what was checked, and can reach a toolchain below a directory that the
    (unprivileged) sandbox uid cannot traverse, such as /root. `status_fd` receives
    bwrap's JSON status (an `exit-code` document only once the command ran).
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
    if len(ro_fds) != len(profile.ro_paths):
        raise ProfileError("toolchain paths were not opened")
    for fd, (_, inside) in zip(ro_fds, profile.ro_paths, strict=True):
        argv += ["--ro-bind-fd", str(fd), inside]
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
