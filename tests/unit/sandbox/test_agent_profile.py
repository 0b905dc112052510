"""The agent profile without bwrap: what the argv binds, what the env refuses, the digest."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gatekeeper.agent import inside
from sandbox import ProfileError, SandboxUnavailable, seccomp
from sandbox import agent as ag
from sandbox.agent_probe import check_inside
from sandbox.bwrap import Bwrap

BW = Bwrap(
    path="/usr/bin/bwrap",
    version=(0, 8, 0),
    flags=frozenset({*ag.REQUIRED_FLAGS, "--cap-drop", "--json-status-fd"}),
    source="system",
)
LIMITS = ag.AgentLimits(wall_s=60, memory_mb=1024, max_procs=256, tmpfs_mb=64, output_bytes=4096)
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": ag.HOME, "LANG": "C.UTF-8"}
KEY = "ANTHROPIC_API_KEY"


def profile(env: dict[str, str] | None = None, **kw: object) -> ag.AgentProfile:
    return ag.agent_profile(LIMITS, [], env if env is not None else BASE_ENV, [], {}, **kw)  # type: ignore[arg-type]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "run" / "oms").mkdir(parents=True)
    (tmp_path / "run" / "home" / ".claude").mkdir(parents=True)
    return tmp_path / "run"


def argv_of(p: ag.AgentProfile, run_dir: Path, **kw: object) -> list[str]:
    return ag.build_agent_argv(
        p, BW, workspace=run_dir.parent / "ws", run_dir=run_dir, cmd=["/bin/true"],
        seccomp_fd=7, ro_fds=[], **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


# ------------------------------------------------------------------ argv ---


def test_argv_unshares_everything_drops_caps_and_applies_the_seccomp_fd(run_dir: Path) -> None:
    argv = argv_of(profile(), run_dir)
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--clearenv"):  # fmt: skip
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--seccomp") + 1] == "7"
    assert argv[argv.index("--") + 1 :] == ["/bin/true"]


def test_argv_binds_run_oms_read_only_workspace_rw_and_home_dirs(run_dir: Path) -> None:
    argv = argv_of(profile(), run_dir)
    assert (str(run_dir / "oms"), ag.RUN_DIR) in pairs(argv, "--ro-bind")
    assert (str(run_dir / "oms"), ag.RUN_DIR) not in pairs(argv, "--bind")
    assert (str(run_dir.parent / "ws"), ag.WORKSPACE) in pairs(argv, "--bind")
    assert (str(run_dir / "home" / ".claude"), f"{ag.HOME}/.claude") in pairs(argv, "--bind")
    assert argv[argv.index("--chdir") + 1] == ag.WORKSPACE
    assert (str(run_dir / "etc" / "passwd"), "/etc/passwd") in pairs(argv, "--ro-bind")
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert {"/tmp", ag.HOME, "/dev/shm"} <= set(tmpfs)


def test_root_is_remounted_read_only_after_every_mount(run_dir: Path) -> None:
    argv = argv_of(profile(), run_dir)
    mounts = {"--bind", "--ro-bind", "--ro-bind-fd", "--tmpfs", "--proc", "--dev", "--symlink"}
    last_mount = max(i for i, a in enumerate(argv) if a in mounts)
    remounts = [i for i, a in enumerate(argv) if a == "--remount-ro"]
    assert argv[remounts[-1] + 1] == "/"
    assert remounts[-1] > last_mount


def test_pty_mode_keeps_the_session_for_the_controlling_tty(run_dir: Path) -> None:
    assert "--new-session" not in argv_of(profile(), run_dir, new_session=False)


def test_no_host_path_of_home_or_shadow_is_bound(run_dir: Path) -> None:
    argv = argv_of(profile(), run_dir)
    assert "/etc/shadow" not in argv
    assert os.path.expanduser("~") not in [b for b, _ in pairs(argv, "--ro-bind")]


def test_missing_run_oms_dir_is_refused(run_dir: Path) -> None:
    (run_dir / "oms").rmdir()
    with pytest.raises(ProfileError, match="/run/oms"):
        argv_of(profile(), run_dir)


def test_home_dir_that_is_a_symlink_is_refused(run_dir: Path) -> None:
    (run_dir / "home" / "evil").symlink_to("/etc")
    with pytest.raises(ProfileError, match="not a directory"):
        argv_of(profile(), run_dir)


def test_bwrap_without_seccomp_support_is_unavailable(run_dir: Path) -> None:
    old = Bwrap(BW.path, BW.version, BW.flags - {"--seccomp"}, "system")
    with pytest.raises(SandboxUnavailable, match="--seccomp"):
        ag.build_agent_argv(profile(), old, workspace=run_dir, run_dir=run_dir,
                            cmd=["true"], seccomp_fd=3, ro_fds=[])  # fmt: skip


def test_read_only_path_over_a_profile_mount_is_refused() -> None:
    with pytest.raises(ProfileError, match="would cover /etc"):
        ag.agent_profile(LIMITS, ["/etc"], BASE_ENV, [], {})


def test_read_only_path_exposing_a_never_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "oms-home").mkdir()
    with pytest.raises(ProfileError, match="would expose"):
        ag.agent_profile(LIMITS, [str(tmp_path)], BASE_ENV, [tmp_path / "oms-home"], {})


# ------------------------------------------------------------------- env ---


def test_a_real_key_under_a_key_name_is_refused() -> None:
    with pytest.raises(ProfileError, match="looks like a secret"):
        profile({**BASE_ENV, KEY: "sk-ant-api03-realkeyrealkey"}, placeholders={KEY})


def test_a_declared_placeholder_with_its_placeholder_value_passes() -> None:
    p = profile({**BASE_ENV, KEY: ag.placeholder(KEY)}, placeholders={KEY})
    assert (KEY, "oms-placeholder-anthropic-api-key") in p.env


def test_a_placeholder_value_not_declared_is_refused() -> None:
    with pytest.raises(ProfileError, match="looks like a secret"):
        profile({**BASE_ENV, "GITHUB_TOKEN": ag.placeholder("GITHUB_TOKEN")})


@pytest.mark.parametrize(
    "name",
    ["SSH_AUTH_SOCK", "GIT_DIR", "LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH", "OMS_HOME",
     "OMS_EGRESS_UPSTREAM_ANTHROPIC", "AWS_PROFILE", "DBUS_SESSION_BUS_ADDRESS"],
)  # fmt: skip
def test_names_that_are_never_passed_are_refused_even_as_placeholders(name: str) -> None:
    with pytest.raises(ProfileError, match="never passed"):
        profile({**BASE_ENV, name: ag.placeholder(name)}, placeholders={name})


def test_a_host_secret_value_under_an_innocent_name_is_refused() -> None:
    host = {"OPENAI_API_KEY": "sk-proj-abcdefghijklmnop"}
    with pytest.raises(ProfileError, match="secret value from oms' environment"):
        ag.agent_profile(LIMITS, [], {**BASE_ENV, "X": "sk-proj-abcdefghijklmnop"}, [], host)


def test_home_other_than_the_agent_home_and_newlines_are_refused() -> None:
    with pytest.raises(ProfileError, match="HOME"):
        profile({**BASE_ENV, "HOME": "/root"})
    with pytest.raises(ProfileError, match="newline"):
        profile({**BASE_ENV, "LANG": "C\nX=1"})


def test_secret_names_cover_suffixes_but_not_token_counts() -> None:
    for name in ("ANTHROPIC_API_KEY", "GH_TOKEN", "DB_PASSWORD", "CLIENT_SECRET", "NPM_AUTH"):
        assert ag.is_secret_name(name), name
    for name in ("MAX_THINKING_TOKENS", "ANTHROPIC_BASE_URL", "CODEX_HOME", "PATH"):
        assert not ag.is_secret_name(name), name


# ---------------------------------------------------------------- digest ---


def test_digest_is_stable_and_covers_env_names_limits_binds_and_seccomp() -> None:
    p = profile()
    assert p.digest == profile().digest and p.digest.startswith("sha256:")
    assert p.canonical()["seccomp"] == seccomp.filter_digest()
    assert profile({**BASE_ENV, "TZ": "UTC"}).digest != p.digest
    wider = ag.AgentProfile(ag.AgentLimits(61, 1024, 256, 64, 4096), p.ro_paths, p.env)
    assert wider.digest != p.digest
    bound = ag.AgentProfile(p.limits, (("/opt/x", "/opt/x"),), p.env)
    assert bound.digest != p.digest
    # Values stay out of the digest (they can be host-specific); names are in.
    assert profile({**BASE_ENV, "LANG": "C"}).digest == p.digest


def test_seccomp_fd_holds_the_filter_at_offset_zero() -> None:
    fd = seccomp.filter_fd()
    try:
        assert os.read(fd, 1 << 16) == seccomp.agent_filter()
    finally:
        os.close(fd)


# ------------------------------------------------------- places and paths ---


def test_oms_install_paths_hold_the_venv_and_the_source_dir() -> None:
    paths = ag.oms_install_paths()
    src = str(Path(ag.__file__).resolve().parent.parent)
    assert src in paths or any(src.startswith(p + "/") for p in paths)
    venv = os.path.realpath(sys.prefix)
    system = [os.path.realpath(d) for d in ("/usr", "/bin", "/lib")]  # bound anyway
    assert any(venv == p or venv.startswith(p + "/") for p in [*paths, *system])


def test_oms_install_paths_refuse_a_dir_holding_home(monkeypatch: pytest.MonkeyPatch) -> None:
    src = Path(ag.__file__).resolve().parent.parent
    monkeypatch.setenv("HOME", str(src / "tests"))
    with pytest.raises(ProfileError, match="holds \\$HOME"):
        ag.oms_install_paths()


def test_host_secret_paths_name_credentials_and_sockets() -> None:
    env = {
        "HOME": "/home/u",
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus,guid=ab",
        "TMUX": "/tmp/tmux-1000/default,123,0",
        "XDG_RUNTIME_DIR": "/run/user/1000",
    }
    paths = ag.host_secret_paths(env)
    for p in ("/home/u/.ssh", "/home/u/.aws", "/home/u/.config/gh", "/home/u/.docker",
              "/tmp/ssh-x/agent.1", "/run/user/1000/bus", "/tmp/tmux-1000/default",
              "/run/user/1000", "/var/run/docker.sock", "/root", "/home/u"):  # fmt: skip
        assert p in paths, p


def test_prepare_run_dir_writes_the_agent_user(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    ag.prepare_run_dir(tmp_path, tmp_path / "ws")
    assert (tmp_path / "etc" / "passwd").read_text().startswith("agent:x:1000:1000:")
    assert ":/home/agent:" in (tmp_path / "etc" / "passwd").read_text()


# ------------------------------------------------------- probe's parser ---


def good_probe_output(p: ag.AgentProfile) -> str:
    env = "\n".join(f"{k}={v}" for k, v in [*p.env, ("PWD", ag.WORKSPACE)])
    return f"""@net
Inter-|   Receive
 face |bytes    packets
    lo:       0       0
@route
@environ
{env}
@caps
CapInh:\t0000000000000000
CapEff:\t0000000000000000
@limits
Max processes             256                  256                  processes
Max open files            4096                 4096                 files
Max core file size        0                    0                    bytes
@seccomp
Seccomp:\t2
@userns
denied
@ptrace
denied
@hidden
@procs
1 bwrap
2 sh
@omspid
@rootfs
readonly
@runoms
readonly
@writable
/workspace yes
/tmp yes
/home/agent yes
@wait
@end
"""


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        ("    lo:", "  eth0:       0  0\n    lo:", "network interfaces visible"),
        ("@route\n", "@route\n00000000 eth0\n", "a network route"),
        ("PATH=", "SSH_AUTH_SOCK=/x\nPATH=", "environment is not exactly"),
        ("CapEff:\t0000000000000000", "CapEff:\t0000000000000400", "capabilities held"),
        ("Max processes             256", "Max processes             999", "limit max processes"),
        ("Seccomp:\t2", "Seccomp:\t0", "no seccomp filter"),
        ("@userns\ndenied", "@userns\nallowed", "user namespaces"),
        ("@ptrace\ndenied", "@ptrace\nallowed", "ptrace is not denied"),
        ("@hidden\n", "@hidden\nvisible /root/.ssh\n", "host path /root/.ssh is visible"),
        ("1 bwrap\n", "1 systemd\n", "host processes are visible"),
        ("@rootfs\nreadonly", "@rootfs\nwritable", "root file system is writable"),
        ("@runoms\nreadonly", "@runoms\nwritable", "/run/oms is not a read-only"),
        ("/tmp yes", "/tmp no", "not writable inside"),
        ("@wait\n", "", "did not finish"),
    ],
)
def test_probe_parser_flags_each_broken_promise(before: str, after: str, reason: str) -> None:
    p = profile()
    good = good_probe_output(p)
    assert check_inside(good, p, []) == []
    assert before in good
    fails = check_inside(good.replace(before, after, 1), p, [])
    assert any(reason in f for f in fails), fails


def test_the_fixed_places_match_the_ones_oms_uses_inside() -> None:
    """sandbox cannot import gatekeeper: the two copies of the places must agree."""
    assert (ag.WORKSPACE, ag.HOME, ag.RUN_DIR) == (inside.WORKSPACE, inside.HOME, inside.RUN_DIR)
    assert inside.MARKER.startswith(ag.RUN_DIR + "/") and inside.SOCKET.startswith(ag.RUN_DIR)


# ------------------------------------------------------------------ masks ---


def _tree_with_socket(tmp_path: Path) -> tuple[Path, Path]:
    import socket

    root = tmp_path / "prefix"
    masked = root / "lib" / "site-packages"
    masked.mkdir(parents=True)
    here = os.getcwd()
    os.chdir(masked)  # bound by a relative name: a socket path is limited to 107 bytes
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("daemon.sock")
        sock.close()
    finally:
        os.chdir(here)
    return root, masked


def test_a_socket_below_a_ro_path_is_refused_unless_a_mask_hides_it(tmp_path: Path) -> None:
    root, masked = _tree_with_socket(tmp_path)
    with pytest.raises(ProfileError, match="holds a unix socket"):
        ag.agent_profile(LIMITS, [str(root)], BASE_ENV, [], {})
    p = ag.agent_profile(LIMITS, [str(root)], BASE_ENV, [], {}, masked=[str(masked)])
    assert p.masked == (str(masked),)
    assert p.canonical()["masked"] == [str(masked)]


def test_a_mask_becomes_an_empty_read_only_tmpfs_after_the_binds(tmp_path: Path) -> None:
    root, masked = _tree_with_socket(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "oms").mkdir(parents=True)
    p = ag.agent_profile(LIMITS, [str(root)], BASE_ENV, [], {}, masked=[str(masked)])
    argv = ag.build_agent_argv(p, BW, workspace=tmp_path / "ws", run_dir=run_dir,
                               cmd=["/bin/true"], seccomp_fd=7, ro_fds=[9])  # fmt: skip
    at = argv.index(str(masked), argv.index("--ro-bind-fd"))
    assert argv[at - 1] == "--tmpfs"
    assert argv[at + 1 : at + 3] == ["--remount-ro", str(masked)]


def test_a_mask_outside_every_ro_path_is_refused(tmp_path: Path) -> None:
    _, masked = _tree_with_socket(tmp_path)
    with pytest.raises(ProfileError, match="not a directory below a ro_path"):
        ag.agent_profile(LIMITS, [], BASE_ENV, [], {}, masked=[str(masked)])
