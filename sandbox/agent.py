"""The `agent` profile (`oms agent run`) and the bwrap argv it becomes.

Allow-list mounts only: the system dirs and curated /etc of the check profile, a
synthetic passwd/group for `agent` (uid 1000, HOME /home/agent), the checked
read-only paths (toolchains, oms' own installation, the agent CLI) bound by
descriptor, the workspace read-write at /workspace, HOME and /tmp capped tmpfs,
the per-run config dirs `run_dir/home/<name>` read-write at /home/agent/<name>, and
`run_dir/oms` READ-ONLY at /run/oms (the run marker and the broker's socket: the
only way out, since every namespace, the network's included, is unshared). Root is
remounted read-only last; a seccomp filter (`seccomp.py`) is applied at exec.

The environment inside is exactly the profile's. Secret-looking names are refused
unless the caller declares them as placeholders *and* their value is `placeholder()`
of the name, so a real key can never be passed by mistake; no value may carry a
secret-looking value of oms' own environment under another name either.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import rfc8785

from . import seccomp
from .bwrap import Bwrap
from .errors import ProfileError, SandboxUnavailable
from .profile import INSIDE_UID, SYSTEM_DIRS, etc_entries, resolve_ro_paths, system_mounts
from .quiet_dirs import QuietDirs
from .runner import SANDBOX_HOST_UID, write_etc
from .staging import chown_tree

AGENT_PROFILE_VERSION = 1
# Fixed places inside (gatekeeper/agent/inside.py names the same; sandbox cannot import it).
WORKSPACE = "/workspace"
HOME = "/home/agent"
RUN_DIR = "/run/oms"
USER = "agent"
HOSTNAME = "oms-agent"
OMS_PACKAGES = ("gatekeeper", "sandbox", "evidence", "policy")
REQUIRED_FLAGS = ("--unshare-all", "--seccomp", "--info-fd", "--ro-bind-fd", "--disable-userns")
PLACEHOLDER_PREFIX = "oms-placeholder-"
# Inside paths a read-only bind may not cover: they are the profile's own mounts.
RESERVED_INSIDE = (WORKSPACE, HOME, RUN_DIR, "/proc", "/dev", "/etc")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOME_DIR = re.compile(r"^[A-Za-z0-9._-]+$")
# Never inside, placeholder or not: they steer loaders, interpreters and git, or lead to
# host sockets, credentials and oms' own state.
NEVER_NAMES = frozenset({
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_ASKPASS", "SUDO_ASKPASS", "NODE_OPTIONS",
    "NODE_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
    "BASH_ENV", "ENV", "PROMPT_COMMAND", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT",
    "RUBYLIB", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "XDG_RUNTIME_DIR",
    "TMUX", "TMUX_PANE", "STY", "DOCKER_HOST", "DOCKER_CONFIG", "KUBECONFIG", "GNUPGHOME",
    "GPG_AGENT_INFO", "OMS_HOME", "NETRC", "CURL_HOME",
})  # fmt: skip
NEVER_PREFIXES = ("GIT_", "LD_", "DYLD_", "AWS_", "OMS_EGRESS_", "GOOGLE_APPLICATION_")
SECRET_SUFFIXES = ("_TOKEN", "_KEY", "_SECRET", "_PASSWORD", "_PASSWD", "_CREDENTIALS",
                   "_APIKEY", "_AUTH")  # fmt: skip
SECRET_PARTS = ("SECRET", "PASSWORD", "CREDENTIAL", "PRIVATE_KEY", "API_KEY", "_TOKEN_")
SECRET_NAMES = frozenset({"TOKEN", "KEY", "APIKEY", "AUTH", "PASSWORD"})
MIN_SECRET_VALUE = 8  # shorter host values are too common to compare against


@dataclass(frozen=True)
class AgentLimits:
    wall_s: int
    memory_mb: int
    max_procs: int
    tmpfs_mb: int
    output_bytes: int
    open_files: int = 4096


@dataclass(frozen=True)
class AgentProfile:
    """A resolved agent profile: checked read-only binds, the whole env inside, limits."""

    limits: AgentLimits
    ro_paths: tuple[tuple[str, str], ...]  # (host real path, inside path)
    env: tuple[tuple[str, str], ...]  # the whole environment inside
    masked: tuple[str, ...] = ()  # below a ro_path, covered by an empty read-only tmpfs
    # A read-only role's run (an advisor, a grader): /workspace is bound read-only.
    workspace_readonly: bool = False

    def canonical(self) -> dict[str, Any]:
        """Binds, limits, env *names*, flags and the seccomp filter's digest."""
        return {
            "version": AGENT_PROFILE_VERSION,
            "name": "agent",
            "system": [p for p in SYSTEM_DIRS if os.path.lexists(p)],
            "etc": sorted(etc_entries()),
            "ro_paths": [list(p) for p in self.ro_paths],
            "workdir": WORKSPACE,
            "home": HOME,
            "run_dir": {"path": RUN_DIR, "readonly": True},
            "env_names": sorted(name for name, _ in self.env),
            "limits": asdict(self.limits),
            "unshare": ["all", "user", "net"],
            "flags": ["die-with-parent", "clearenv", "disable-userns", "cap-drop-all"],
            "seccomp": seccomp.filter_digest(),
            "tmpfs": ["/tmp", HOME, "/dev/shm"],  # noqa: S108 # nosec B108
            "masked": list(self.masked),
            "root": {"readonly": True},
        } | ({"workdir_readonly": True} if self.workspace_readonly else {})

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(rfc8785.dumps(self.canonical())).hexdigest()


def placeholder(name: str) -> str:
    """The one value a secret-looking name may have inside (e.g. ANTHROPIC_API_KEY)."""
    return PLACEHOLDER_PREFIX + name.lower().replace("_", "-")


def is_secret_name(name: str) -> bool:
    up = name.upper()
    return (
        up in SECRET_NAMES
        or up.endswith(SECRET_SUFFIXES)
        or any(part in up for part in SECRET_PARTS)
    )


def _never(name: str) -> bool:
    up = name.upper()
    return up in NEVER_NAMES or up.startswith(NEVER_PREFIXES)


def check_env(
    env: Mapping[str, str], environ: Mapping[str, str], placeholders: Collection[str] = ()
) -> tuple[tuple[str, str], ...]:
    """The env inside, sorted; ProfileError on any name or value that could leak authority."""
    host_secrets = {
        v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_VALUE
    }
    for name, value in env.items():
        if not _NAME.match(name):
            raise ProfileError(f"agent env name {name!r} is not a plain variable name")
        if "\n" in value or "\0" in value:
            raise ProfileError(f"agent env {name} holds a newline or NUL")
        if _never(name):
            raise ProfileError(f"agent env {name} is never passed into the agent sandbox")
        if is_secret_name(name):
            if name not in placeholders or value != placeholder(name):
                raise ProfileError(
                    f"agent env {name} looks like a secret; only a declared placeholder "
                    f"(value {placeholder(name)!r}) may be passed, the real key stays outside"
                )
        if any(s in value for s in host_secrets):
            raise ProfileError(f"agent env {name} carries a secret value from oms' environment")
    if env.get("HOME", HOME) != HOME:
        raise ProfileError(f"agent env HOME must be {HOME}")
    return tuple(sorted(env.items()))


def agent_profile(
    limits: AgentLimits,
    ro_paths: Sequence[str],
    env: Mapping[str, str],
    never: Sequence[Path],
    environ: Mapping[str, str] | None = None,
    *,
    placeholders: Collection[str] = (),
    masked: Sequence[str] = (),
    workspace_readonly: bool = False,
    quiet: QuietDirs | None = None,
) -> AgentProfile:
    """The agent profile. `never`: paths to refuse ($OMS_HOME, the key, the repository).

    `ro_paths` are checked as the check profile's are (`resolve_ro_paths`); `environ`
    (default: oms' own) is the host environment the env values are compared against.
    SandboxUnavailable if the seccomp filter cannot be built. `quiet`: as `resolve_ro_paths`.
    """
    env_in = os.environ if environ is None else environ
    for inside in ro_paths:
        for reserved in RESERVED_INSIDE:
            if _overlaps(inside, reserved):
                raise ProfileError(f"agent ro_path {inside} would cover {reserved}")
    real_masks = [os.path.realpath(m) for m in masked]
    resolved = resolve_ro_paths(ro_paths, env_in, never, masked=real_masks, quiet=quiet)
    for mask in real_masks:
        if not os.path.isdir(mask) or not any(_within(mask, r) and mask != r for r, _ in resolved):
            raise ProfileError(f"agent masked path {mask} is not a directory below a ro_path")
    seccomp.filter_digest()  # fail now, not at the first run, without libseccomp
    return AgentProfile(limits, resolved, check_env(env, env_in, placeholders),
                        tuple(real_masks), workspace_readonly)  # fmt: skip


def _overlaps(a: str, b: str) -> bool:
    pa, pb = Path(os.path.normpath(a)), Path(os.path.normpath(b))
    return pa == pb or pa in pb.parents or pb in pa.parents


def _within(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def oms_install_paths() -> list[str]:
    """What `python -I -m gatekeeper` (and `oms mcp`) needs read-only inside.

    The venv (sys.prefix), the interpreter's real prefix (symlinks resolved), and for a
    source or editable install the directory holding oms' four packages. Paths under
    the system dirs are bound anyway and left out; a path that is or holds $HOME is a
    ProfileError.
    """
    exe = os.path.realpath(sys.executable)
    found = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(exe))]
    source = Path(__file__).resolve().parent.parent
    if all((source / pkg / "__init__.py").is_file() for pkg in OMS_PACKAGES):
        found.append(str(source))
    home = os.path.realpath(os.environ.get("HOME") or os.path.expanduser("~"))
    system = [os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    out: list[str] = []
    for path in sorted({os.path.realpath(p) for p in found}, key=len):
        if _within(home, path):
            raise ProfileError(
                f"oms is installed in {path}, which is or holds $HOME ({home}); the agent "
                "sandbox cannot bind it; install oms in a venv outside the home directory"
            )
        if any(_within(path, s) for s in system) or any(_within(path, o) for o in out):
            continue
        out.append(path)
    return out


def oms_masked_paths() -> list[str]:
    """Below `oms_install_paths()`, what the agent does not need: the base interpreter's own
    site-packages when oms' venv does not use it (a pyenv's can hold tens of thousands of
    files, each walked for sockets at every run)."""
    if sys.prefix == sys.base_prefix or _venv_uses_system_site():
        return []
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = Path(os.path.realpath(sys.base_prefix)) / "lib" / version / "site-packages"
    return [str(site)] if site.is_dir() else []


def _venv_uses_system_site() -> bool:
    try:
        cfg = (Path(sys.prefix) / "pyvenv.cfg").read_text()
    except OSError:
        return True  # unknown: keep it visible
    for line in cfg.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "include-system-site-packages":
            return value.strip().lower() == "true"
    return False


def host_secret_paths(environ: Mapping[str, str]) -> list[str]:
    """Generic host places the probe must find absent inside (the caller adds $OMS_HOME,
    the key and the repository)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    rel = (".ssh", ".aws", ".config/gh", ".docker", ".kube", ".gnupg", ".netrc",
           ".git-credentials")  # fmt: skip
    paths = [os.path.join(home, r) for r in rel]
    paths += ["/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket",
              "/var/run/docker.sock", "/run/docker.sock", f"/tmp/tmux-{os.getuid()}",  # noqa: S108 # nosec B108
              "/root", home]  # fmt: skip
    if environ.get("SSH_AUTH_SOCK"):
        paths.append(environ["SSH_AUTH_SOCK"])
    for part in environ.get("DBUS_SESSION_BUS_ADDRESS", "").split(";"):
        for kv in part.partition(":")[2].split(","):
            if kv.startswith("path="):  # abstract sockets are per network namespace
                paths.append(kv[len("path=") :])
    if environ.get("TMUX"):
        paths.append(environ["TMUX"].split(",")[0])
    if environ.get("XDG_RUNTIME_DIR"):
        paths.append(environ["XDG_RUNTIME_DIR"])
    fixed = {WORKSPACE, HOME, RUN_DIR}
    return [p for p in dict.fromkeys(paths) if p and os.path.normpath(p) not in fixed]


def prepare_run_dir(run_dir: Path, workspace: Path) -> None:
    """Write `run_dir/etc/{passwd,group}` for `agent`; as root, hand run_dir and the
    workspace (and the broker's socket in run_dir/oms) to the sandbox uid."""
    etc = run_dir / "etc"
    etc.mkdir(mode=0o755, exist_ok=True)
    if not (etc / "passwd").is_file():
        write_etc(etc, USER, HOME)
    if os.geteuid() == 0:
        chown_tree(workspace, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
        chown_tree(run_dir, SANDBOX_HOST_UID, SANDBOX_HOST_UID)


def home_dirs(run_dir: Path) -> list[str]:
    """The per-run config dirs `run_dir/home/<name>` (real directories, plain names)."""
    base = run_dir / "home"
    if not base.exists():
        return []
    names = sorted(os.listdir(base))
    for name in names:
        if not _HOME_DIR.match(name) or name in (".", ".."):
            raise ProfileError(f"agent home dir name {name!r} is not a plain name")
        if not stat.S_ISDIR(os.lstat(base / name).st_mode):
            raise ProfileError(f"agent home dir {base / name} is not a directory")
    return names


def check_bwrap(bw: Bwrap) -> None:
    missing = [f for f in REQUIRED_FLAGS if not bw.has(f)]
    if missing:
        raise SandboxUnavailable(
            f"{bw.path} lacks options the agent profile needs: {', '.join(missing)}"
        )


def build_agent_argv(
    profile: AgentProfile,
    bw: Bwrap,
    *,
    workspace: Path,
    run_dir: Path,
    cmd: Sequence[str],
    seccomp_fd: int,
    ro_fds: Sequence[int],
    status_fd: int | None = None,
    info_fd: int | None = None,
    new_session: bool = True,
) -> list[str]:
    """The full bwrap argv of the agent profile (see the module docstring).

    `ro_fds`: O_PATH descriptors of `profile.ro_paths` (`runner.open_ro_paths`).
    `new_session=False` only for pty mode, where the pty must stay the controlling tty.
    """
    if not cmd:
        raise ProfileError("no command to run")
    if not (run_dir / "oms").is_dir():
        raise ProfileError(f"{run_dir / 'oms'} is missing: it is bound at {RUN_DIR}")
    if len(ro_fds) != len(profile.ro_paths):
        raise ProfileError("the read-only paths were not opened")
    check_bwrap(bw)
    argv = [bw.path, "--unshare-all", "--unshare-user", "--hostname", HOSTNAME,
            "--die-with-parent", "--disable-userns",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID)]  # fmt: skip
    if new_session:
        argv.append("--new-session")
    if bw.has("--cap-drop"):
        argv += ["--cap-drop", "ALL"]
    argv += system_mounts(run_dir / "etc", profile.limits.tmpfs_mb)
    argv += ["--size", str(profile.limits.tmpfs_mb * 1024 * 1024), "--tmpfs", HOME]
    for fd, (_, inside) in zip(ro_fds, profile.ro_paths, strict=True):
        argv += ["--ro-bind-fd", str(fd), inside]
    for mask in profile.masked:  # an empty, read-only directory in place of what lies there
        argv += ["--perms", "0555", "--size", "4096", "--tmpfs", mask, "--remount-ro", mask]
    for name in home_dirs(run_dir):
        argv += ["--bind", str(run_dir / "home" / name), f"{HOME}/{name}"]
    argv += ["--ro-bind" if profile.workspace_readonly else "--bind", str(workspace), WORKSPACE]
    argv += ["--ro-bind", str(run_dir / "oms"), RUN_DIR, "--chdir", WORKSPACE]
    # Last mount operation: bwrap's root tmpfs (uncapped) becomes read-only.
    argv += ["--remount-ro", "/"]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--seccomp", str(seccomp_fd), "--clearenv"]
    for name, value in profile.env:
        argv += ["--setenv", name, value]
    return [*argv, "--", *cmd]
