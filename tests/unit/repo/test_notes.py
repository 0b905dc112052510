"""`refs/notes/oms` written and published: `add_note` (sorted unique lines, git's layout,
objects in the user's store) and `push_notes` (fetch, `cat_sort_uniq` merge, push, never
forced), against real repositories and real bare remotes on disk. The lines are stand-in
envelopes: this module stores lines, it does not read them."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.env import clean_env
from support.repos import git, make_repo

from gatekeeper.repo import notes
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.notes import NOTES_REF, NotesRaceLost, add_note, note_line, note_lines
from gatekeeper.repo.refs import read_ref
from gatekeeper.repo.remote import push_ref

A = note_line({"payload": "a", "signatures": []})
B = note_line({"payload": "b", "signatures": []})
C = note_line({"payload": "c", "signatures": []})


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_add_note_keeps_lines_sorted_and_unique_and_git_reads_it(
    tmp_path: Path, oms_home: Path
) -> None:
    top = make_repo(tmp_path / "repo")
    sha = _head(top)
    repo = open_repo(top)
    assert add_note(repo, sha, B) is True
    first = read_ref(repo, NOTES_REF)
    assert add_note(repo, sha, A) is True
    assert add_note(repo, sha, B) is False  # already there: nothing written
    tip = read_ref(repo, NOTES_REF)
    assert tip != first and git(top, "rev-parse", f"{tip}^").strip() == first
    assert note_lines(repo, sha) == [A[:-1], B[:-1]]
    # The user's own git (its own object store, no oms mirror) reads the note.
    assert git(top, "notes", "--ref=oms", "show", sha).encode() == A + B
    shown = git(top, "log", "-1", "--notes=oms", "--format=%N", sha).encode()
    assert A[:-1] in shown and B[:-1] in shown
    assert git(top, "fsck", "--no-dangling", "--connectivity-only") == ""


def test_add_note_keeps_an_existing_fan_out_tree_readable(tmp_path: Path, oms_home: Path) -> None:
    """A notes tree another git wrote with fan-out (`ab/cd…`) gains the line beside it."""
    top = make_repo(tmp_path / "repo")
    sha = _head(top)
    blob = git(top, "hash-object", "-w", "--stdin", input=C).strip()
    inner = git(top, "mktree", input=f"100644 blob {blob}\t{sha[2:]}\n".encode()).strip()
    outer = git(top, "mktree", input=f"040000 tree {inner}\t{sha[:2]}\n".encode()).strip()
    commit = git(top, "commit-tree", "-m", "fan-out notes", outer).strip()
    git(top, "update-ref", NOTES_REF, commit)
    repo = open_repo(top)
    assert note_lines(repo, sha) == [C[:-1]]
    assert add_note(repo, sha, A) is True
    assert note_lines(repo, sha) == [A[:-1], C[:-1]]
    assert git(top, "notes", "--ref=oms", "show", sha).encode() == A + C


def test_two_publishers_both_keep_their_notes_on_one_remote(
    tmp_path: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clones, each with its own $OMS_HOME, publish a line on the same commit; the
    second push merges (the remote's history keeps the first publisher's commit) and a
    third clone fetching refs/notes/oms sees both lines."""
    origin = tmp_path / "origin.git"
    src = make_repo(tmp_path / "src")
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(src, "push", "-q", str(origin), "main")
    sha = _head(src)
    clones = []
    for name in ("one", "two"):
        git(tmp_path, "clone", "-q", str(origin), name)
        clones.append(tmp_path / name)
    pushed = []
    for clone, line in zip(clones, (A, B), strict=True):
        monkeypatch.setenv("OMS_HOME", str(tmp_path / f"oms-{clone.name}"))
        repo = open_repo(clone)
        add_note(repo, sha, line)
        pushed.append(notes.push_notes(repo, "origin"))
    there = git(origin, "rev-parse", NOTES_REF).strip()
    assert there == pushed[1]
    git(origin, "merge-base", "--is-ancestor", pushed[0], there)  # never forced
    third = tmp_path / "three"
    git(tmp_path, "clone", "-q", str(origin), "three")
    git(third, "fetch", "-q", "origin", f"{NOTES_REF}:{NOTES_REF}")
    assert git(third, "notes", "--ref=oms", "show", sha).encode() == A + B
    # The first publisher pushing again merges the second's line back in locally.
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "oms-one"))
    assert notes.push_notes(open_repo(clones[0]), "origin") == there
    assert git(clones[0], "notes", "--ref=oms", "show", sha).encode() == A + B


def test_a_stale_push_is_refused_not_forced(tmp_path: Path, oms_home: Path) -> None:
    origin = tmp_path / "origin.git"
    top = make_repo(tmp_path / "repo")
    git(tmp_path, "init", "-q", "--bare", str(origin))
    sha = _head(top)
    repo = open_repo(top)
    add_note(repo, sha, A)
    old = read_ref(repo, NOTES_REF)
    add_note(repo, sha, B)
    new = read_ref(repo, NOTES_REF)
    assert old and new
    assert push_ref(repo, str(origin), new, NOTES_REF) is True
    assert push_ref(repo, str(origin), old, NOTES_REF) is False
    assert git(origin, "rev-parse", NOTES_REF).strip() == new


def test_a_race_lost_every_time_is_a_typed_refusal(
    tmp_path: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = tmp_path / "origin.git"
    top = make_repo(tmp_path / "repo")
    git(tmp_path, "init", "-q", "--bare", str(origin), env=clean_env(tmp_path))
    repo = open_repo(top)
    add_note(repo, _head(top), A)
    tries: list[str] = []
    monkeypatch.setattr(notes, "push_ref", lambda *a: tries.append(a[2]) and False)
    with pytest.raises(NotesRaceLost) as caught:
        notes.push_notes(repo, str(origin))
    assert caught.value.exit_code == 4 and len(tries) == notes.PUSH_TRIES
    assert git(origin, "for-each-ref").strip() == ""
