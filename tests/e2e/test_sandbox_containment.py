"""Containment of `oms sandbox run`: what a hostile command inside can see and reach.

Every test runs real bubblewrap (/usr/bin/bwrap) on a scratch copy of a real git
repository and asserts the effect from outside: the host server saw no
connection, the host process is still alive, the real repository is unchanged.

Host-side bait (secrets, sockets, a process) is made reachable to the sandbox's
host uid on purpose (world-readable files in a world-traversable directory, a
process running as the sandbox uid when the tests run as root), so that only
the sandbox's namespaces hide it: if a namespace or a bind broke, the test fails.
Commands inside use /bin/sh and Debian's /usr/bin/python3, never the venv.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json, run_oms
from support.repos import git as _git
from support.repos import make_repo
from support.sandbox import (
    AS_ROOT,
    NEEDS_BWRAP_AND_PYTHON,
    PY,
    SH,
    cli_env,
    sandbox_toml,
    traversable_dir,
)

from gatekeeper.gates.sandboxed import sandbox_run
from sandbox.runner import SANDBOX_HOST_UID

pytestmark = NEEDS_BWRAP_AND_PYTHON


# ---------------------------------------------------------------- fixtures ---


@pytest.fixture
def exposed_dir() -> Iterator[Path]:
    """A world-traversable host directory outside every sandbox bind (under the host tmp)."""
    with traversable_dir("oms-sbx-bait-") as path:
        yield path


@pytest.fixture
def state(exposed_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A fake HOME and OMS_HOME for this test (in-process and for CLI subprocesses)."""
    home = exposed_dir / "home"
    home.mkdir(mode=0o755)
    oms_home = exposed_dir / "oms-state"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OMS_HOME", str(oms_home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return {"home": home, "oms_home": oms_home}


@pytest.fixture
def repo(tmp_path: Path, state: dict[str, Path]) -> Path:
    return make_repo(tmp_path / "repo")


def run_sh(repo_dir: Path, script: str, timeout_s: int = 20) -> dict[str, Any]:
    """Run a shell script in the sandbox through the library; the JSON dict."""
    return sandbox_run(repo_dir, [SH, "-c", script], timeout_s).to_json()


def run_py(repo_dir: Path, code: str, timeout_s: int = 20) -> dict[str, Any]:
    return sandbox_run(repo_dir, [PY, "-c", code], timeout_s).to_json()


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60) -> dict[str, Any]:
    """`python -m gatekeeper ARGS`; the one JSON object it prints (envelope checked)."""
    return parse_single_json(run_oms(args, env=env, timeout=timeout))


def ran(result: dict[str, Any]) -> str:
    """stdout of a run that really ran to its end (guards against vacuous passes)."""
    assert result["timed_out"] is False, result
    assert "@done" in result["stdout"], result
    return result["stdout"]


# ---------------------------------------------------------------- network ---


class _TcpServer:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_host_tcp_server_on_loopback_is_unreachable_and_accepts_nothing(repo: Path) -> None:
    server = _TcpServer()
    try:
        code = f"""
import socket
for host in ("127.0.0.1", "localhost"):
    try:
        socket.create_connection((host, {server.port}), timeout=2).close()
        print("CONNECTED", host)
    except OSError as e:
        print("refused", host, e.errno)
print("@done")
"""
        out = ran(run_py(repo, code))
        assert "CONNECTED" not in out
        assert server.accepted == 0
        # Control: the server did accept from the host, so "0" above means something.
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        for _ in range(50):
            if server.accepted:
                break
            threading.Event().wait(0.05)
        assert server.accepted == 1
    finally:
        server.close()


def test_host_unix_socket_path_is_absent_and_unreachable(repo: Path, exposed_dir: Path) -> None:
    path = exposed_dir / "host.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o777)
    srv.listen(4)
    srv.settimeout(0.5)
    try:
        code = f"""
import os, socket
print("exists" if os.path.exists({str(path)!r}) else "absent")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect({str(path)!r}); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)
print("@done")
"""
        out = ran(run_py(repo, code))
        assert "absent" in out and "exists" not in out
        assert "CONNECTED" not in out
        with pytest.raises(TimeoutError):
            srv.accept()  # nothing is waiting to be accepted
    finally:
        srv.close()


def test_host_abstract_unix_socket_is_unreachable(repo: Path) -> None:
    name = "\0oms-sbx-test-" + secrets.token_hex(8)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(4)
    srv.settimeout(0.5)
    try:
        code = f"""
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect({name!r}); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)
print("@done")
"""
        out = ran(run_py(repo, code))
        assert "CONNECTED" not in out
        with pytest.raises(TimeoutError):
            srv.accept()
        # Control: the abstract socket is reachable from the host's network namespace.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(name)
        srv.accept()[0].close()
        c.close()
    finally:
        srv.close()


def test_only_loopback_interface_exists_inside(repo: Path) -> None:
    out = ran(run_sh(repo, "cat /proc/net/dev; echo @done"))
    ifaces = [ln.split(":")[0].strip() for ln in out.splitlines()[2:] if ":" in ln]
    assert ifaces == ["lo"]


# ------------------------------------------------------------ environment ---


def test_host_environment_token_is_not_visible_in_env_or_proc_environ(
    tmp_path: Path, state: dict[str, Path]
) -> None:
    repo_dir = make_repo(tmp_path / "repo")
    token = "ghp_" + secrets.token_hex(18)
    env = cli_env(state, OMS_TEST_TOKEN=token, AWS_SECRET_ACCESS_KEY=token)
    script = (
        "env; echo @proc; "
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\"; done; echo @done"
    )
    obj = run_cli(
        ["sandbox", "run", "--repo", str(repo_dir), "--json", "--", SH, "-c", script], env
    )
    assert obj["exit_code"] == 0 and obj["timed_out"] is False, obj
    out = obj["stdout"]
    assert "@done" in out
    # Control: the dump worked (/proc/1/environ is bwrap's and was readable).
    assert out.count("PATH=/usr/local/bin:/usr/bin:/bin") >= 2
    assert token not in out and token not in obj["stderr"]
    assert "OMS_TEST_TOKEN" not in out and "AWS_SECRET_ACCESS_KEY" not in out
    assert "OMS_HOME" not in out
    assert str(state["home"]) not in out


# ------------------------------------------------------------- filesystem ---


def test_ssh_key_oms_keys_shadow_and_host_tmp_file_are_absent(
    tmp_path: Path, state: dict[str, Path]
) -> None:
    marker = "SECRET-" + secrets.token_hex(12)
    ssh = state["home"] / ".ssh"
    ssh.mkdir(mode=0o755)
    (ssh / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{marker}\n")
    os.chmod(ssh / "id_ed25519", 0o644)  # readable by anyone: only the mount ns hides it
    host_tmp = Path("/tmp") / f"oms-sbx-secret-{secrets.token_hex(8)}"
    host_tmp.write_text(marker + "\n")
    os.chmod(host_tmp, 0o644)
    try:
        repo_dir = make_repo(tmp_path / "repo")
        env = cli_env(state)
        init = run_cli(["init", "--repo", str(repo_dir), "--json"], env)
        assert init["ok"] is True
        keys = state["oms_home"] / "keys"
        targets = [ssh / "id_ed25519", ssh, keys, state["oms_home"], Path("/etc/shadow"),
                   host_tmp, state["home"], repo_dir, Path("/root")]  # fmt: skip
        for t in targets:
            assert t.exists(), f"control: {t} should exist on the host"
        checks = "".join(
            f'if [ -e "{t}" ]; then echo "VISIBLE {t}"; cat "{t}" 2>/dev/null; '
            f'else echo "absent {t}"; fi; '
            for t in targets
        )
        script = checks + "ls -A /home/sandbox; cat /home/sandbox/.ssh/id_ed25519; echo @done"
        obj = run_cli(
            ["sandbox", "run", "--repo", str(repo_dir), "--json", "--", SH, "-c", script], env
        )
        out = obj["stdout"]
        assert "@done" in out, obj
        assert "VISIBLE" not in out, out
        for t in targets:
            assert f"absent {t}" in out
        assert marker not in out and marker not in obj["stderr"]
    finally:
        host_tmp.unlink(missing_ok=True)


def test_writes_in_workspace_never_reach_the_real_repository(
    state: dict[str, Path], exposed_dir: Path
) -> None:
    # World-traversable, so a bind of the real repository would work (and be caught here).
    real = make_repo(
        exposed_dir / "victim",
        files={"a.txt": "original a\n", "dir/b.txt": "original b\n"},
    )
    hook = real / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(hook, 0o755)

    def snapshot() -> dict[str, bytes | str]:
        snap: dict[str, bytes | str] = {}
        for p in sorted(real.rglob("*")):
            rel = str(p.relative_to(real))
            if rel == ".git/index":
                continue  # git status may refresh its stat cache
            if p.is_symlink():
                snap[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                snap[rel] = p.read_bytes()
            else:
                snap[rel] = "dir"
        return snap

    status_before = _git(real, "status", "--porcelain", "--ignored")
    before = snapshot()
    script = f"""
cd /workspace
if [ -e .git ]; then echo HAS_GIT; else echo no_git; fi
if [ -e "{real}" ]; then echo REAL_REPO_VISIBLE; fi
echo pwned > a.txt && echo wrote
echo pwned >> dir/b.txt && echo appended
rm -f README.md && echo deleted
echo new > new.txt && echo created
mkdir -p .git/hooks && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit && echo hooked
printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/post-checkout && echo hooked2
echo @done
"""
    out = ran(run_sh(real, script))
    # Control: the writes did succeed inside, on the scratch copy.
    for word in ("no_git", "wrote", "appended", "deleted", "created", "hooked", "hooked2"):
        assert word in out.split(), out
    assert "HAS_GIT" not in out and "REAL_REPO_VISIBLE" not in out
    assert snapshot() == before
    assert _git(real, "status", "--porcelain", "--ignored") == status_before == ""
    assert sorted(os.listdir(real / ".git" / "hooks")) == sorted(
        k.split("/")[-1] for k in before if k.startswith(".git/hooks/")
    )


def test_committed_symlinks_do_not_reveal_host_files(
    tmp_path: Path, state: dict[str, Path], exposed_dir: Path
) -> None:
    marker = "HOSTSECRET-" + secrets.token_hex(12)
    secret = exposed_dir / "secret.txt"
    secret.write_text(marker + "\n")
    os.chmod(secret, 0o644)
    links = {
        "leak_hostname": "/etc/hostname",
        "leak_secret": str(secret),
        "leak_dir": str(exposed_dir),
        "leak_rel": "../.." + str(secret),
        "leak_shadow": "../../etc/shadow",
    }
    repo_dir = make_repo(tmp_path / "repo", symlinks=links)
    script = "cd /workspace\n" + "".join(
        f'if cat "{name}" >/dev/null 2>&1; then echo "READABLE {name}"; cat "{name}"; '
        f'else echo "unreadable {name}"; fi\n'
        for name in links
    )
    script += 'ls leak_dir/ 2>/dev/null && echo "LISTED leak_dir"\necho @done\n'
    out = ran(run_sh(repo_dir, script))
    for name in links:
        assert f"unreadable {name}" in out, out
    assert "READABLE" not in out and "LISTED" not in out
    assert marker not in out
    hostname = Path("/etc/hostname")
    if hostname.exists() and len(hostname.read_text().strip()) >= 6:
        assert hostname.read_text().strip() not in out


# ---------------------------------------------------------------- processes ---


def test_only_sandbox_pids_are_visible_and_host_process_cannot_be_killed(repo: Path) -> None:
    # As root, the host process runs as the sandbox's own host uid: then only the
    # PID namespace stands between the sandbox and `kill -9`.
    kwargs: dict[str, Any] = (
        {"user": SANDBOX_HOST_UID, "group": SANDBOX_HOST_UID, "extra_groups": []} if AS_ROOT else {}
    )
    host = subprocess.Popen(["sleep", "300"], **kwargs)
    try:
        script = f"""
echo "pids: $(ls -d /proc/[0-9]* | wc -l)"
echo "ps: $(ps -e --no-headers | wc -l)"
if [ -e /proc/{host.pid} ]; then echo "SEES {host.pid}"; fi
kill -9 {host.pid}; echo "kill_rc=$?"
kill -9 -1 2>/dev/null; echo "killall_rc=$?"
echo @done
"""
        out = ran(run_sh(repo, script))
        counts = dict(ln.split(": ") for ln in out.splitlines() if ln.startswith(("pids", "ps")))
        assert int(counts["pids"]) <= 8, out
        assert int(counts["ps"]) <= 8, out
        assert f"SEES {host.pid}" not in out
        assert "kill_rc=0" not in out
        assert host.poll() is None, "the host process was killed from inside the sandbox"
    finally:
        host.kill()
        host.wait()


# --------------------------------------------------------------- privilege ---


def test_mount_is_refused(repo: Path) -> None:
    script = """
mkdir -p /tmp/x
mount -t tmpfs none /tmp/x 2>/dev/null; echo "mount_rc=$?"
mount --bind /workspace /tmp/x 2>/dev/null; echo "bind_rc=$?"
echo "mounted_at_x=$(grep -c ' /tmp/x ' /proc/self/mountinfo)"
echo @done
"""
    out = ran(run_sh(repo, script))
    assert "mount_rc=0" not in out and "bind_rc=0" not in out
    assert "mounted_at_x=0" in out


def test_nested_user_namespace_is_refused(repo: Path) -> None:
    code = """
import ctypes, subprocess
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
print("unshare_call", libc.unshare(CLONE_NEWUSER), ctypes.get_errno())
for argv in (["unshare", "-U", "true"], ["unshare", "-r", "true"]):
    r = subprocess.run(argv, capture_output=True)
    print("unshare_cmd", r.returncode)
print("@done")
"""
    out = ran(run_py(repo, code))
    lines = out.splitlines()
    call = next(ln for ln in lines if ln.startswith("unshare_call")).split()
    assert call[1] == "-1", out
    cmds = [ln.split()[1] for ln in lines if ln.startswith("unshare_cmd")]
    assert len(cmds) == 2 and "0" not in cmds, out


def test_no_capabilities_inside(repo: Path) -> None:
    out = ran(run_sh(repo, "grep '^Cap' /proc/self/status; echo @done"))
    caps = [ln for ln in out.splitlines() if ln.startswith("Cap")]
    assert len(caps) == 5
    assert all(int(ln.split(":")[1].strip(), 16) == 0 for ln in caps), caps


MINIMAL_DEV = {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
               "stdout", "tty", "urandom", "zero", "console"}  # fmt: skip


def test_raw_devices_are_absent_and_dev_is_minimal(repo: Path) -> None:
    raw = ["/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/mem", "/dev/kmem", "/dev/port",
           "/dev/kmsg", "/dev/fuse", "/dev/net/tun", "/dev/kvm"]  # fmt: skip
    script = (
        "echo @ls; ls -A /dev; echo @raw; "
        + "".join(f'[ -e "{p}" ] && echo "PRESENT {p}"; ' for p in raw)
        + "echo @done"
    )
    out = ran(run_sh(repo, script))
    listing = out.split("@ls\n", 1)[1].split("@raw", 1)[0].split()
    assert set(listing) <= MINIMAL_DEV, listing
    assert "PRESENT" not in out, out


@pytest.mark.parametrize("target", ["/dev/shm/fill", "/dev/fill"])
def test_dev_tmpfs_cannot_hold_more_than_tmpfs_mb(tmp_path: Path, state: Any, target: str) -> None:
    """bwrap's `--dev` is a tmpfs of half the host RAM, writable by the sandbox uid, and
    tmpfs pages escape RLIMIT_AS: without a capped /dev/shm and a read-only /dev, a
    check could fill host memory past both `tmpfs_mb` and `memory_mb`."""
    repo_dir = make_repo(
        tmp_path / "repo", {"oms.toml": sandbox_toml({"tmpfs_mb": 16, "memory_mb": 256})}
    )
    script = f"""
head -c 67108864 /dev/zero > {target} 2>/dev/null
echo "size=$(stat -c %s {target} 2>/dev/null || echo 0)"
echo @done
"""
    out = ran(run_sh(repo_dir, script))
    size = int(out.split("size=", 1)[1].split()[0])
    assert size <= 16 * 1024 * 1024, f"{target} held {size} bytes with tmpfs_mb = 16"
