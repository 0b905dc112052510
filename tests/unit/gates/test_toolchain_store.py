"""Toolchain trees, records and the scratch links, without building anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gatekeeper.errors import ConfigError, Tampered
from gatekeeper.gates.toolchain import store
from gatekeeper.gates.toolchain.manage import gc
from gatekeeper.gates.toolchain.payloads import ToolchainRecord
from gatekeeper.gates.toolchain.tree import (
    ToolchainUnavailable,
    freeze,
    remove_tree,
    tree_digest,
)
from gatekeeper.repo.scratch import add_links

HEX = "ab" * 32


def make_tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "bin" / "tool", 0o755)
    (root / "lib").mkdir()
    (root / "lib" / "mod.py").write_text("X = 1\n")
    os.symlink("/usr/bin/python3", root / "bin" / "python")
    return root


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("OMS_TOOLCHAIN_DIR", str(tmp_path / "tc"))
    return tmp_path


def record(tree: Path, tid: str = f"sha256:{HEX}") -> ToolchainRecord:
    td = tree_digest(tree)
    return ToolchainRecord(id=tid, name="py", kind="python-venv", lock="requirements.lock",
                           inputs={"requirements.lock": "sha256:" + "0" * 64},
                           runtime="/usr/bin/python3.11", runtime_version="Python 3.11.2",
                           allow_build=False, dir=str(tree), tree_digest=td.digest,
                           files=td.files, bytes=td.bytes, prepared_at="2026-12-01T00:00:00Z",
                           bin_dirs=(str(tree / "bin"),), env=(), links=(), binds=())  # fmt: skip


def test_the_tree_digest_sees_content_mode_links_and_names(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t")
    first = tree_digest(tree)
    assert first.files == 2 and first.links == ((str(tree / "bin" / "python"), "/usr/bin/python3"),)
    assert tree_digest(tree) == first
    (tree / "lib" / "mod.py").write_text("X = 2\n")
    second = tree_digest(tree)
    assert second.digest != first.digest
    os.chmod(tree / "lib" / "mod.py", 0o755)
    assert tree_digest(tree).digest != second.digest
    os.chmod(tree / "lib" / "mod.py", 0o644)
    os.unlink(tree / "bin" / "python")
    os.symlink("/usr/bin/python3.11", tree / "bin" / "python")
    assert tree_digest(tree).digest != second.digest
    os.unlink(tree / "bin" / "python")
    os.symlink("/usr/bin/python3", tree / "bin" / "python")
    assert tree_digest(tree).digest == second.digest
    (tree / "lib" / "new").mkdir()  # an empty directory counts too
    assert tree_digest(tree).digest != second.digest


def test_a_special_file_in_a_tree_is_refused(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t")
    os.mkfifo(tree / "lib" / "pipe")
    with pytest.raises(ToolchainUnavailable, match="special file"):
        tree_digest(tree)


def test_freeze_makes_everything_read_only_and_remove_still_removes(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t")
    outside = tmp_path / "outside"
    outside.write_text("keep")
    os.symlink(outside, tree / "link")  # remove_tree must not follow it
    before = tree_digest(tree)
    freeze(tree)
    assert os.stat(tree / "lib" / "mod.py").st_mode & 0o777 == 0o444
    assert os.stat(tree / "bin" / "tool").st_mode & 0o777 == 0o555
    assert os.stat(tree / "lib").st_mode & 0o777 == 0o555
    assert tree_digest(tree).digest == before.digest  # the exec bit is what counts
    remove_tree(tree)
    assert not tree.exists() and outside.read_text() == "keep"


def test_records_round_trip_and_a_bad_one_is_tampered(homes: Path) -> None:
    tree = make_tree(homes / "tc" / HEX)
    rec = record(tree)
    assert store.read_record(rec.id) is None
    store.write_record(rec)
    assert store.read_record(rec.id) == rec
    assert list(store.all_records()) == [rec]
    path = store.records_dir() / f"{HEX}.json"
    path.write_text(path.read_text().replace('"kind"', '"kind2"'))
    with pytest.raises(Tampered, match="does not fit"):
        store.read_record(rec.id)
    other = "sha256:" + "cd" * 32
    store.write_record(rec)
    os.rename(path, store.records_dir() / f"{'cd' * 32}.json")
    with pytest.raises(Tampered, match="names another toolchain"):
        store.read_record(other)


def test_the_toolchain_dir_must_lie_outside_the_state_root(
    homes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_TOOLCHAIN_DIR", str(homes / "state" / "tc"))
    with pytest.raises(ConfigError, match="outside"):
        store.toolchain_root()
    monkeypatch.setenv("OMS_TOOLCHAIN_DIR", "relative/dir")
    with pytest.raises(ConfigError, match="absolute"):
        store.toolchain_root()
    monkeypatch.delenv("OMS_TOOLCHAIN_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(homes / "cache"))
    assert store.toolchain_root() == (homes / "cache" / "oms" / "toolchains").resolve()


def test_gc_removes_unrecorded_trees_and_unused_ones_but_not_a_build_in_progress(
    homes: Path,
) -> None:
    root = homes / "tc"
    used = make_tree(root / HEX)
    store.write_record(record(used))
    store.mark_used(f"sha256:{HEX}")
    half = make_tree(root / ("ef" * 32))  # a build that died: no record
    busy = make_tree(root / ("12" * 32))  # a build running right now
    foreign = root / "not-ours"
    foreign.mkdir()
    with store.build_lock("sha256:" + "12" * 32):
        out = gc(None, keep_days=30, dry_run=False)
    assert set(out.removed) == {str(half), str(busy)}  # listed, but the busy one stays
    assert not half.exists() and busy.exists() and used.exists() and foreign.exists()
    assert gc(None, keep_days=30, dry_run=True).removed == (str(busy),)
    out = gc(None, keep_days=0, dry_run=True)
    assert str(used) in out.removed and used.exists()  # dry run: nothing removed


def test_links_are_made_only_through_real_directories_of_the_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    (copy / "web").mkdir(parents=True)
    (copy / "own").mkdir()
    (copy / "own" / "node_modules").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, copy / "evil")
    made = add_links(copy, [("web/node_modules", "/tc/node_modules"),
                            ("own/node_modules", "/tc/node_modules"),
                            ("evil/node_modules", "/tc/node_modules"),
                            ("gone/node_modules", "/tc/node_modules"),
                            ("node_modules", "/tc/node_modules")])  # fmt: skip
    assert made == ["web/node_modules", "node_modules"]
    assert os.readlink(copy / "web" / "node_modules") == "/tc/node_modules"
    assert (copy / "own" / "node_modules").is_dir()  # the candidate's own stays
    assert list(outside.iterdir()) == []  # never through the planted symlink
