"""The state root is trusted by owner, not by path, on every use (StrictModes-style).

Driven through the library (`EvidenceStore.init`/`open`, `load_key`) for the table of
tamperings, through the real CLI for the exit code and envelope, and as an
unprivileged uid (`omstest`, made with `useradd` and entered with `setpriv`) where
the answer depends on who runs oms.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json
from support.repos import make_repo

from evidence import EvidenceStore, KeyUnavailable, StoreUnavailable, load_key
from evidence.state import check_state_dirs, ensure_private_dir

OmsJson = Callable[..., tuple[int, dict[str, Any]]]

EXIT_OK, EXIT_UNAVAILABLE = 0, 4
NOBODY = 65534  # another uid than ours (tests run as root or as omstest)
REPO_ID = "rstateroottest"
WORKTREE = Path(__file__).resolve().parents[2]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def store_root(oms_home: Path) -> Path:
    EvidenceStore.init(oms_home, REPO_ID)
    return oms_home


def _use(root: Path) -> None:
    """What every command does with the store: open it and load the key."""
    assert EvidenceStore.open(root, REPO_ID).key.key_id


# -- tampering with a directory oms uses, after init -----------------------------------

DIRS = ["", "keys", "repos", f"repos/{REPO_ID}", f"repos/{REPO_ID}/evidence",
        f"repos/{REPO_ID}/evidence/blobs", f"repos/{REPO_ID}/transfers", "witness"]  # fmt: skip


def _chown_other(d: Path) -> str:
    os.chown(d, NOBODY, -1)
    return f"owned by uid {NOBODY}"


def _group_writable(d: Path) -> str:
    os.chmod(d, 0o770)
    return "writable by group or others (mode 0770)"


def _other_writable(d: Path) -> str:
    os.chmod(d, 0o703)
    return "writable by group or others (mode 0703)"


def _symlinked(d: Path) -> str:
    real = d.parent.parent / f"{d.name}.real" if d.name else d.with_name("real")
    d.rename(real)
    d.symlink_to(real, target_is_directory=True)
    return "is a symlink"


TAMPER = [_chown_other, _group_writable, _other_writable, _symlinked]


@needs_root
@pytest.mark.parametrize("sub", DIRS, ids=[d or "root" for d in DIRS])
@pytest.mark.parametrize("tamper", TAMPER, ids=lambda f: f.__name__.strip("_"))
def test_every_use_refuses_a_store_directory_that_is_not_ours_alone(
    store_root: Path, sub: str, tamper: Callable[[Path], str]
) -> None:
    target = store_root / sub if sub else store_root
    if tamper is _symlinked and not sub:
        target = store_root  # the state root itself as a symlink to an identical copy
    why = tamper(target)
    with pytest.raises(StoreUnavailable) as info:
        _use(store_root)
    msg = str(info.value)
    assert str(target) in msg and why in msg, msg
    assert "\n" not in msg


@needs_root
def test_a_directory_owned_by_someone_else_is_refused_and_never_chmodded(oms_home: Path) -> None:
    oms_home.mkdir(mode=0o755)
    os.chmod(oms_home, 0o755)
    os.chown(oms_home, NOBODY, NOBODY)
    with pytest.raises(StoreUnavailable, match=f"owned by uid {NOBODY}"):
        EvidenceStore.init(oms_home, REPO_ID)
    st = oms_home.stat()
    assert (st.st_uid, _mode(oms_home)) == (NOBODY, 0o755)
    assert list(oms_home.iterdir()) == []


def test_a_group_writable_state_root_of_ours_is_refused_not_fixed(oms_home: Path) -> None:
    oms_home.mkdir()
    os.chmod(oms_home, 0o775)
    with pytest.raises(StoreUnavailable, match="mode 0775"):
        EvidenceStore.init(oms_home, REPO_ID)
    assert _mode(oms_home) == 0o775


def test_our_own_readable_state_root_is_tightened_at_init_only(oms_home: Path) -> None:
    oms_home.mkdir()
    os.chmod(oms_home, 0o755)
    check_state_dirs(oms_home)  # a plain use reads; it changes nothing
    assert _mode(oms_home) == 0o755
    EvidenceStore.init(oms_home, REPO_ID)
    assert _mode(oms_home) == 0o700


@needs_root
def test_a_key_file_owned_by_someone_else_is_refused(store_root: Path) -> None:
    key = store_root / "keys" / "ed25519.pem"
    os.chown(key, NOBODY, -1)
    assert _mode(key) == 0o600
    with pytest.raises(KeyUnavailable, match=f"owned by uid {NOBODY}"):
        load_key(store_root)


def test_a_key_that_is_a_fifo_is_refused_without_blocking(store_root: Path) -> None:
    key = store_root / "keys" / "ed25519.pem"
    key.unlink()
    os.mkfifo(key, 0o600)
    with pytest.raises(KeyUnavailable, match="not a regular file"):
        load_key(store_root)


def test_a_blob_directory_made_later_is_vetted_too(store_root: Path) -> None:
    blobs = store_root / "repos" / REPO_ID / "evidence" / "blobs"
    (blobs / "ab").symlink_to(store_root, target_is_directory=True)
    with pytest.raises(StoreUnavailable, match="symlink"):
        ensure_private_dir(blobs / "ab")


# -- the way to the state root -----------------------------------------------------------


@dataclass(frozen=True)
class Way:
    """A directory above the state root, as someone might have left it."""

    name: str
    mode: int
    owner: int
    trusted: bool


WAYS = [
    Way("sticky-world-writable", 0o1777, 0, True),  # like /tmp
    Way("root-owned", 0o755, 0, True),
    Way("other-owned", 0o755, NOBODY, False),
    Way("world-writable", 0o777, 0, False),
    Way("group-writable", 0o775, 0, False),
    Way("other-owned-sticky", 0o1777, NOBODY, False),
]


@needs_root
@pytest.mark.parametrize("way", WAYS, ids=lambda w: w.name)
def test_an_ancestor_others_could_write_is_refused_as_strictmodes_does(
    tmp_path: Path, way: Way
) -> None:
    above = tmp_path / "above"
    above.mkdir()
    os.chmod(above, way.mode)
    os.chown(above, way.owner, -1)
    root = above / "oms"
    if way.trusted:
        EvidenceStore.init(root, REPO_ID)
        _use(root)
        return
    with pytest.raises(StoreUnavailable) as info:
        EvidenceStore.init(root, REPO_ID)
    assert str(above) in str(info.value)
    assert not root.exists(), "nothing is created below an untrusted directory"


@needs_root
def test_an_ancestor_made_untrusted_after_init_is_refused_on_the_next_use(tmp_path: Path) -> None:
    above = tmp_path / "above"
    above.mkdir()
    root = above / "oms"
    EvidenceStore.init(root, REPO_ID)
    os.chown(above, NOBODY, -1)
    with pytest.raises(StoreUnavailable, match=f"{above} is owned by uid {NOBODY}"):
        _use(root)


@needs_root
@pytest.mark.parametrize("target", ["absolute", "relative"])
@pytest.mark.parametrize("owner", [0, NOBODY], ids=["root-owned", "other-owned"])
def test_a_symlink_above_the_state_root_is_followed_only_when_its_owner_is_trusted(
    tmp_path: Path, owner: int, target: str
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "link"
    link.symlink_to(real if target == "absolute" else Path("..", "real"))
    os.lchown(link, owner, -1)
    root = link / "oms"
    if owner == 0:
        EvidenceStore.init(root, REPO_ID)
        _use(root)
        assert (real / "oms" / "keys").is_dir()
        return
    with pytest.raises(StoreUnavailable, match=f"{link} is a symlink owned by uid {NOBODY}"):
        EvidenceStore.init(root, REPO_ID)
    assert not (real / "oms").exists()


# -- the CLI: exit 4 with a one-line reason --------------------------------------------


@needs_root
def test_cli_refuses_an_untrusted_state_root_with_exit_4_naming_path_and_owner(
    git_repo: Path, oms_json: OmsJson, oms_home: Path
) -> None:
    code, out = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK, out
    (repo_dir,) = (oms_home / "repos").iterdir()
    os.chown(repo_dir, NOBODY, -1)
    for args in (["evidence", "audit"], ["evidence", "note", "-m", "x"], ["init"]):
        code, out = oms_json([*args, "--repo", git_repo])
        assert code == EXIT_UNAVAILABLE, (args, out)
        assert out["error"]["kind"] == "unavailable"
        assert f"{repo_dir} is owned by uid {NOBODY}" in out["error"]["message"]


def test_cli_refuses_a_symlink_inside_the_state_root(
    git_repo: Path, oms_json: OmsJson, oms_home: Path, tmp_path: Path
) -> None:
    code, out = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK, out
    elsewhere = tmp_path / "elsewhere"
    (oms_home / "repos").rename(elsewhere)
    (oms_home / "repos").symlink_to(elsewhere, target_is_directory=True)
    code, out = oms_json(["evidence", "audit", "--repo", git_repo])
    assert code == EXIT_UNAVAILABLE, out
    assert "repos is a symlink" in out["error"]["message"]


# -- as an unprivileged uid ------------------------------------------------------------


@dataclass(frozen=True)
class Unprivileged:
    uid: int
    gid: int
    python: str
    pythonpath: str


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        check=False,
    )  # may race another session making the same user: look it up again either way
    return pwd.getpwnam(name)


def _as_user(
    user: Unprivileged, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    cmd = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", *argv]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def omstest() -> Unprivileged:
    """User `omstest` and a Python it can run oms with (this one, or the system's of the
    same minor version when this one lives where omstest cannot reach)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("making and entering an unprivileged uid needs root, useradd and setpriv")
    try:
        pw = _ensure_user("omstest")
    except KeyError:
        pytest.skip("useradd could not create user omstest")
    path = os.pathsep.join([str(WORKTREE), sysconfig.get_paths()["purelib"]])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path}
    user = Unprivileged(pw.pw_uid, pw.pw_gid, "", path)
    minor = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, minor):
        probe = _as_user(user, [python, "-c", "import gatekeeper.cli, cryptography"], env)
        if probe.returncode == 0:
            return Unprivileged(pw.pw_uid, pw.pw_gid, python, path)
    pytest.skip(f"no Python {sys.version_info[:2]} that omstest can run oms with")


@dataclass(frozen=True)
class UserWorld:
    user: Unprivileged
    base: Path  # omstest's own directory under /tmp
    repo: Path

    def env(self, oms_home: Path) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "PYTHONPATH": self.user.pythonpath, "LC_ALL": "C",
                "HOME": str(self.base / "home"), "OMS_HOME": str(oms_home),
                "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip

    def oms(self, oms_home: Path, *args: str) -> tuple[int, dict[str, Any]]:
        argv = [self.user.python, "-m", "gatekeeper", *args, "--repo", str(self.repo), "--json"]
        proc = _as_user(self.user, argv, self.env(oms_home))
        return proc.returncode, parse_single_json(proc)


@pytest.fixture
def user_world(omstest: Unprivileged, oms_env: dict[str, str]) -> Iterator[UserWorld]:
    # pytest's tmp_path is root's (0700): omstest gets its own directory in sticky /tmp.
    base = Path(tempfile.mkdtemp(prefix="oms-omstest-", dir="/tmp"))
    try:
        repo = make_repo(base / "repo", env=oms_env)
        (base / "home").mkdir()
        for p in [base, *base.rglob("*")]:
            os.lchown(p, omstest.uid, omstest.gid)
        yield UserWorld(omstest, base, repo)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_unprivileged_uid_uses_its_own_state_root_below_sticky_tmp(user_world: UserWorld) -> None:
    root = user_world.base / "state"
    code, out = user_world.oms(root, "init")
    assert code == EXIT_OK, out
    assert root.stat().st_uid == user_world.user.uid
    code, out = user_world.oms(root, "evidence", "audit")
    assert code == EXIT_OK, out
    assert out["intact"] is True


def test_unprivileged_uid_refuses_a_state_root_below_another_users_directory(
    user_world: UserWorld,
) -> None:
    # Its own state root, but inside a directory another uid owns: that uid could swap it.
    above = user_world.base / "theirs"
    above.mkdir()
    os.chown(above, NOBODY, NOBODY)
    root = above / "state"
    root.mkdir(mode=0o700)
    os.chown(root, user_world.user.uid, user_world.user.gid)
    code, out = user_world.oms(root, "init")
    assert code == EXIT_UNAVAILABLE, out
    assert f"{above} is owned by uid {NOBODY}" in out["error"]["message"]
    assert list(root.iterdir()) == []


def test_unprivileged_uid_refuses_a_state_root_owned_by_root(user_world: UserWorld) -> None:
    root = user_world.base / "roots"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)  # writable, so only the owner check can refuse it
    code, out = user_world.oms(root, "init")
    assert code == EXIT_UNAVAILABLE, out
    assert f"{root} is owned by uid 0" in out["error"]["message"]
    assert (root.stat().st_uid, _mode(root)) == (0, 0o777)
    assert list(root.iterdir()) == []
