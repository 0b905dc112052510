"""A bound path walked for sockets once is not walked again until a directory of it changes.

Real directories, a real unix socket bound after the walk was remembered, a real cache file.
A test that needs a walk remembered sets `RECENT_NS` to 0 (a walk is otherwise remembered
only when none of its directories changed in the two seconds before it) and then waits, by
the kernel's own clock, for a ctime later than every directory's, so that the change it
makes is visible in the ctime, as it is for any change made a tick after a walk.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox.profile as profile
import sandbox.quiet_dirs as quiet_dirs
from sandbox import ProfileError
from sandbox.profile import resolve_ro_paths
from sandbox.quiet_dirs import QuietDirs
from tests.support import ctime


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    top = tmp_path / "tc"
    (top / "lib" / "pkg").mkdir(parents=True)
    (top / "lib" / "pkg" / "mod.py").write_text("X = 1\n")
    (top / "bin").mkdir()
    return top


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The roots `_refuse_sockets` really walked."""
    seen: list[Path] = []
    real = profile._refuse_sockets

    def counting(root: Path, *args: object, **kwargs: object) -> None:
        seen.append(root)
        real(root, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(profile, "_refuse_sockets", counting)
    yield seen


def tick_past(top: Path) -> None:
    """Until the kernel's clock gives a ctime later than every directory's below `top`."""
    ctime.tick_past(max(os.lstat(d).st_ctime_ns for d, _, _ in os.walk(top)), top.parent)


def resolve(tree: Path, cache: Path) -> None:
    resolve_ro_paths([str(tree)], env_for(tree.parent), [], quiet=QuietDirs(cache))


def test_a_remembered_walk_is_not_walked_again(
    tree: Path, tmp_path: Path, walks: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 0)
    cache = tmp_path / "state" / "cache" / "quiet-dirs.json"
    resolve(tree, cache)
    assert walks == [tree] and os.stat(cache).st_mode & 0o777 == 0o600
    resolve(tree, cache)
    assert walks == [tree]  # the second run lstats the directories, it lists none


def test_a_socket_bound_after_the_walk_is_refused(
    tree: Path, tmp_path: Path, walks: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 0)
    cache = tmp_path / "cache.json"
    resolve(tree, cache)
    tick_past(tree)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(tree / "lib" / "pkg" / "agent.sock"))
        with pytest.raises(ProfileError, match="holds a unix socket"):
            resolve(tree, cache)
    finally:
        sock.close()
    assert walks == [tree, tree]


def test_a_directory_renamed_in_after_the_walk_is_walked(
    tree: Path, tmp_path: Path, walks: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 0)
    cache = tmp_path / "cache.json"
    resolve(tree, cache)
    tick_past(tree)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere").rename(tree / "bin" / "moved")
    resolve(tree, cache)
    assert walks == [tree, tree]


def test_a_walk_of_directories_just_changed_is_not_remembered(
    tree: Path, tmp_path: Path, walks: list[Path]
) -> None:
    cache = tmp_path / "cache.json"
    resolve(tree, cache)
    resolve(tree, cache)
    assert walks == [tree, tree] and not cache.exists()


def test_a_cache_others_can_write_is_not_read(
    tree: Path, tmp_path: Path, walks: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 0)
    cache = tmp_path / "cache.json"
    resolve(tree, cache)
    os.chmod(cache, 0o666)
    resolve(tree, cache)
    assert walks == [tree, tree]
