"""The check profile without bwrap: rw_paths (what is refused, where they are bound), the
canonical form that every existing profile digest rests on, and reach as root."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from policy import SandboxPolicy
from sandbox import ProfileError, resolve_rw_paths
from sandbox.bwrap import Bwrap
from sandbox.profile import WORKDIR, Profile, build_argv, check_profile, resolve_ro_paths
from sandbox.staging import unreachable_dir

BW = Bwrap(path="/usr/bin/bwrap", version=(0, 8, 0), flags=frozenset({"--cap-drop"}),
           source="system")  # fmt: skip


def env_for(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home)}


def profile(tmp_path: Path, rw: list[str] | None = None, ro: list[str] | None = None) -> Profile:
    pol = SandboxPolicy(ro_paths=ro or [])
    return check_profile(pol, environ=env_for(tmp_path), never=[], rw_paths=rw or [])


# ------------------------------------------------------------- rw_paths ---


def test_a_rw_path_is_its_real_path_bound_at_the_path_given(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    got = resolve_rw_paths([str(tmp_path / "link")], env_for(tmp_path), [])
    assert got == ((str(tmp_path / "real"), str(tmp_path / "link")),)


def test_a_rw_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ProfileError, match="is not a directory"):
        resolve_rw_paths([str(tmp_path / "f")], env_for(tmp_path), [])


def test_a_missing_relative_or_workspace_rw_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        resolve_rw_paths([str(tmp_path / "nope")], env_for(tmp_path), [])
    for given in ("relative/dir", WORKDIR, f"{WORKDIR}/x"):
        with pytest.raises(ProfileError, match="must be absolute and not in /workspace"):
            resolve_rw_paths([given], env_for(tmp_path), [])


@pytest.mark.parametrize("where", ["contains_home", "in_ssh", "in_never", "contains_never"])
def test_a_rw_path_at_a_forbidden_place_is_refused(tmp_path: Path, where: str) -> None:
    env = env_for(tmp_path)
    never = tmp_path / "oms-home"
    (never / "inner").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "keys").mkdir()
    given, why = {
        "contains_home": (tmp_path, "would expose"),
        "in_ssh": (tmp_path / "home" / ".ssh" / "keys", "lies inside"),
        "in_never": (never / "inner", "lies inside"),
        "contains_never": (never, "would expose"),
    }[where]
    with pytest.raises(ProfileError, match=f"sandbox rw_path {given} {why}"):
        resolve_rw_paths([str(given)], env, [never])


def test_a_rw_path_holding_a_unix_socket_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "deep").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(dest / "deep" / "s"))
        with pytest.raises(ProfileError, match=f"sandbox rw_path {dest} holds a unix socket"):
            resolve_rw_paths([str(dest)], env_for(tmp_path), [])
    finally:
        s.close()


def test_rw_paths_are_bound_by_fd_after_the_ro_paths_and_before_the_workspace(
    tmp_path: Path,
) -> None:
    (tmp_path / "tc").mkdir()
    (tmp_path / "dest").mkdir()
    p = profile(tmp_path, rw=[str(tmp_path / "dest")], ro=[str(tmp_path / "tc")])
    argv = build_argv(p, BW, tmp_path / "scratch", tmp_path / "etc", ["/bin/true"], [5],
                      rw_fds=[6])  # fmt: skip
    ro, rw, ws = argv.index("--ro-bind-fd"), argv.index("--bind-fd"), argv.index(WORKDIR)
    assert argv[ro : ro + 3] == ["--ro-bind-fd", "5", str(tmp_path / "tc")]
    assert argv[rw : rw + 3] == ["--bind-fd", "6", str(tmp_path / "dest")]
    assert ro < rw < ws and argv[ws - 2] == "--bind"
    assert argv.index("--remount-ro", ws) > ws  # the root is still made read-only last
    with pytest.raises(ProfileError, match="were not opened"):
        build_argv(p, BW, tmp_path / "scratch", tmp_path / "etc", ["/bin/true"], [5])


# -------------------------------------------------------------- digest ---

CANONICAL_KEYS = ["dev", "env_names", "etc", "flags", "home", "limits", "name", "ro_paths",
                  "root", "system", "unshare", "version", "workdir"]  # fmt: skip


def test_a_profile_without_rw_paths_keeps_its_canonical_form_and_digest(tmp_path: Path) -> None:
    p = profile(tmp_path)
    doc = p.canonical()
    assert sorted(doc) == CANONICAL_KEYS and doc["version"] == 2
    (tmp_path / "dest").mkdir()
    with_rw = profile(tmp_path, rw=[str(tmp_path / "dest")])
    assert sorted(with_rw.canonical()) == sorted([*CANONICAL_KEYS, "rw_paths"])
    assert with_rw.canonical()["rw_paths"] == [[str(tmp_path / "dest")] * 2]
    assert with_rw.digest != p.digest
    assert {k: v for k, v in with_rw.canonical().items() if k != "rw_paths"} == doc


# --------------------------------------------------------------- reach ---


def test_a_ro_path_below_a_private_dir_is_accepted_as_root_too(tmp_path: Path) -> None:
    tc = tmp_path / "private" / "tc"
    tc.mkdir(parents=True)
    os.chmod(tmp_path / "private", 0o700)
    assert unreachable_dir(tc) is not None  # the sandbox uid cannot search the way to it
    got = resolve_ro_paths([str(tc)], env_for(tmp_path), [])
    assert got == ((str(tc), str(tc)),)
