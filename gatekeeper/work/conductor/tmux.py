"""oms' own tmux server: a private socket, argv lists only, never the user's default server.

Every call is `tmux -S <socket> -f /dev/null …` with a minimal environment (no `$TMUX`, so
a call from inside the user's own tmux never reaches that server). A pane's command is
always given as two or more argv words after `--`: tmux execs several words directly, and
only a single word would go through `sh -c`. There is no `send-keys` here, by design:
nothing typed into a pane, so no data can become keystrokes. `capture` is diagnostic
only: bounded and sanitised, never read as state (liveness is the pane's ProcId).

The socket lives in a private directory: `$XDG_RUNTIME_DIR/oms`, else `<state root>/tmux`,
made 0700; a directory that is a symlink, not ours or not 0700 is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess  # nosec B404 -- tmux, with argv lists
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidence import state_root
from gatekeeper.errors import Blocked, Unavailable, UsageError
from gatekeeper.text import sanitize
from gatekeeper.work.conductor.model import SESSION_PREFIX

MAX_CAPTURE_CHARS = 4000
TMUX_TIMEOUT_S = 10
# What a pane's process may inherit of this one's environment: oms' state, git's clean
# config and the locale (given as `-e` words: nothing secret).
# Not GIT_CONFIG_COUNT/KEY_n/VALUE_n: a value may be a credential (an extra header), and
# `-e` words are readable by any local user.
_PASS_NAMES = frozenset({"PATH", "HOME", "LANG", "TMPDIR", "GIT_TERMINAL_PROMPT",
                         "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                         "PYTHONDONTWRITEBYTECODE", "SSL_CERT_FILE"})  # fmt: skip
_PASS_PREFIXES = ("OMS_", "XDG_", "LC_")
# Provider keys (for the broker, outside the sandbox) never go into tmux's argv, where any
# local user could read them: they reach the server as its environment when oms starts it.
_KEY_PREFIXES = ("ANTHROPIC_", "OPENAI_")


class TmuxUnavailable(Unavailable):
    """tmux is not installed, or its server refused a call."""


@dataclass(frozen=True)
class Pane:
    id: str  # %<n>
    pid: int


def socket_dir() -> Path:
    """The private directory of oms' tmux sockets (made 0700; refused when not private)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        path = Path(runtime) / "oms"
    else:
        path = state_root() / "tmux"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise TmuxUnavailable(f"cannot make the tmux socket directory {path}: {exc}") from None
    checked_private(path)
    return path


def checked_private(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise Blocked(f"the tmux socket directory {path} is not a plain directory")
    if st.st_uid != os.geteuid():
        raise Blocked(f"the tmux socket directory {path} is not owned by this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise Blocked(f"the tmux socket directory {path} is not private (mode "
                      f"{stat.S_IMODE(st.st_mode):o}, want 700)")  # fmt: skip


def socket_for(repo_id: str) -> Path:
    """The socket of one repository's conductor server."""
    return socket_dir() / f"{repo_id[:12]}.sock"


def session_for(repo_id: str) -> str:
    return f"{SESSION_PREFIX}{repo_id[:12]}"


def pane_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items()
            if (k in _PASS_NAMES or k.startswith(_PASS_PREFIXES)) and not _secret(k)}  # fmt: skip


def _secret(name: str) -> bool:
    return name.startswith(_KEY_PREFIXES) or any(w in name for w in ("TOKEN", "SECRET", "KEY"))


def _keys() -> dict[str, str]:
    """Only the provider keys the broker reads; any other secret-looking name stays out."""
    return {k: v for k, v in os.environ.items() if k.startswith(_KEY_PREFIXES)}


def _binary() -> str:
    found = shutil.which("tmux")
    if found is None:
        raise TmuxUnavailable("tmux is not installed (Debian: apt-get install tmux)")
    return found


class Tmux:
    """One private tmux server, named by its socket path."""

    def __init__(self, socket: Path | str) -> None:
        self.socket = str(socket)
        if not os.path.isabs(self.socket):
            raise UsageError("a tmux socket path is absolute")
        checked_private(Path(self.socket).parent)

    def argv(self, *args: str) -> list[str]:
        return [_binary(), "-S", self.socket, "-f", os.devnull, *args]

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**pane_env(), **_keys(), "LC_ALL": "C.UTF-8", "TERM": "xterm-256color"}
        try:
            done = subprocess.run(
                self.argv(*args),
                env=env,
                capture_output=True,
                text=True,  # nosec B603
                timeout=TMUX_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TmuxUnavailable(f"tmux {args[0]}: {exc}") from None
        if check and done.returncode != 0:
            raise TmuxUnavailable(f"tmux {args[0]} failed: {sanitize(done.stderr.strip())[:200]}")
        return done

    def has_session(self, session: str) -> bool:
        if not os.path.exists(self.socket):
            return False
        return self._run("has-session", "-t", f"={session}", check=False).returncode == 0

    def _spawn(self, verb: Sequence[str], cmd: Sequence[str], cwd: Path | None,
               env: Mapping[str, str]) -> Pane:  # fmt: skip
        if len(cmd) < 2:
            raise UsageError("a pane's command is two or more argv words (one would be shell)")
        args = [*verb, "-P", "-F", "#{pane_id} #{pane_pid}"]
        if cwd is not None:
            args += ["-c", str(cwd)]
        for k, v in sorted(env.items()):
            args += ["-e", f"{k}={v}"]
        done = self._run(*args, "--", *cmd)
        return _pane(done.stdout)

    def new_session(
        self,
        session: str,
        window: str,
        cmd: Sequence[str],
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Pane:
        """A detached session whose first window runs `cmd`."""
        verb = ["new-session", "-d", "-s", session, "-n", window, "-x", "200", "-y", "50"]
        return self._spawn(verb, cmd, cwd, pane_env() if env is None else env)

    def new_window(
        self,
        session: str,
        window: str,
        cmd: Sequence[str],
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Pane:
        """A new window in `session` (which must exist) running `cmd`."""
        verb = ["new-window", "-d", "-t", f"={session}:", "-n", window]
        return self._spawn(verb, cmd, cwd, pane_env() if env is None else env)

    def alive(self, pane: str) -> bool:
        """The pane still exists (its process is judged by ProcId, not by this)."""
        done = self._run("display-message", "-p", "-t", pane, "#{pane_dead}", check=False)
        return done.returncode == 0 and done.stdout.strip() == "0"

    def kill_pane(self, pane: str) -> None:
        self._run("kill-pane", "-t", pane, check=False)

    def kill_server(self) -> None:
        if os.path.exists(self.socket):
            self._run("kill-server", check=False)

    def capture(self, pane: str, lines: int = 40) -> str:
        """The pane's last `lines` lines, sanitised and bounded: for a human's diagnosis."""
        done = self._run("capture-pane", "-p", "-t", pane, "-S", f"-{max(1, min(lines, 500))}",
                         check=False)  # fmt: skip
        if done.returncode != 0:
            return ""
        text = "\n".join(sanitize(line, 400) for line in done.stdout.splitlines())
        return text[-MAX_CAPTURE_CHARS:]

    def clients_on(self, pane: str) -> int:
        """How many clients are attached and showing `pane` (each client's current pane,
        as tmux reports it); TmuxUnavailable when tmux cannot say."""
        if not os.path.exists(self.socket):
            return 0
        done = self._run("list-clients", "-F", "#{pane_id}", check=False)
        if done.returncode != 0:
            if "no server running" in done.stderr:
                return 0
            raise TmuxUnavailable(f"tmux list-clients failed: {sanitize(done.stderr)[:200]}")
        return sum(1 for line in done.stdout.split() if line == pane)

    def attach_argv(self, session: str) -> list[str]:
        return self.argv("attach-session", "-t", f"={session}")


def _pane(out: str) -> Pane:
    parts = out.strip().split()
    if len(parts) != 2 or not parts[0].startswith("%") or not parts[1].isdigit():
        raise TmuxUnavailable(f"tmux gave no pane id and pid: {sanitize(out)[:80]!r}")
    return Pane(parts[0], int(parts[1]))
