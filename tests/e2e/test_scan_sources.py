"""`oms scan` where developers scan: the repository's files by default, `--staged` for a
pre-commit hook, `--history` for commits; skipped files reported; findings grouped.

Real git repositories in `tmp_path`, the real Gitleaks and detect-secrets. Fake secrets
are built at run time; this file holds no scanner-matchable string.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json
from support.repos import make_repo
from support.secrets import fake_aws_key

from gatekeeper.gates import secrets, sources
from gatekeeper.gates.sources import EMPTY_TREE, MAX_FILE_BYTES
from gatekeeper.repo.git import open_repo

RunOms = Callable[..., subprocess.CompletedProcess[str]]
RunGit = Callable[..., str]


def fp(secret: str) -> str:
    return hashlib.sha256(b"oms-finding-v1\x00" + secret.encode()).hexdigest()


def scan_json(run_oms: RunOms, args: list[str], **kw: Any) -> tuple[int, dict[str, Any]]:
    proc = run_oms(["scan", *args, "--json"], **kw)
    return proc.returncode, parse_single_json(proc)


def found_at(out: dict[str, Any]) -> set[tuple[str, str]]:
    """(file, fingerprint) of every finding."""
    return {(f["file"], f["fingerprint"]) for f in out["findings"]}


def commit_all(run_git: RunGit, repo: Path, message: str) -> str:
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", message)
    return run_git(repo, "rev-parse", "HEAD").strip()


def test_default_scope_is_tracked_and_untracked_not_ignored_files(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    tracked, untracked, ignored = fake_aws_key(), fake_aws_key(), fake_aws_key()
    (git_repo / ".gitignore").write_text("build/\n")
    (git_repo / "app.py").write_text(f'KEY = "{tracked}"\n')
    commit_all(run_git, git_repo, "app")
    (git_repo / "new.py").write_text(f'\nNEW = "{untracked}"\n')
    (git_repo / "build").mkdir()
    (git_repo / "build" / "out.py").write_text(f'OUT = "{ignored}"\n')

    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 3
    assert found_at(out) == {("app.py", fp(tracked)), ("new.py", fp(untracked))}
    assert {f["line"] for f in out["findings"] if f["file"] == "new.py"} == {2}
    assert all("commit" not in f for f in out["findings"])
    code, again = scan_json(run_oms, ["--repo", str(git_repo)])  # from elsewhere, --repo
    assert code == 3 and found_at(again) == found_at(out)


def test_binary_large_and_unreadable_files_are_skipped_and_reported_not_failed(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    binary = b"\x7fELF\x00\x01\x02" + f"KEY={key}\n".encode()
    (git_repo / "tool.bin").write_bytes(binary)
    big = (f'K = "{key}"\n' + "x" * 100 + "\n").encode() * (MAX_FILE_BYTES // 100)
    (git_repo / "big.txt").write_bytes(big)
    (git_repo / "utf16.txt").write_bytes(f"K = {key}\n".encode("utf-16"))  # text, not binary
    commit_all(run_git, git_repo, "files")

    code, out = scan_json(run_oms, [], cwd=git_repo)
    skipped = {s["path"]: (s["reason"], s["bytes"]) for s in out["skipped"]}
    assert skipped == {"tool.bin": ("binary", len(binary)), "big.txt": ("too_large", len(big))}
    assert code == 3  # the UTF-16 text is scanned, decoded
    assert {f["file"] for f in out["findings"]} == {"utf16.txt"}

    (git_repo / "utf16.txt").unlink()
    commit_all(run_git, git_repo, "no text secret")
    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 0 and out["findings"] == [] and len(out["skipped"]) == 2
    human = run_oms(["scan"], cwd=git_repo)
    assert human.returncode == 0
    assert "skipped 2 file(s), not scanned: 1 binary, 1 too_large" in human.stdout
    assert "tool.bin: binary" in human.stdout and key not in human.stdout


def test_a_tracked_file_that_is_now_a_fifo_is_reported_unreadable(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    (git_repo / "pipe").write_text("x\n")
    commit_all(run_git, git_repo, "pipe")
    (git_repo / "pipe").unlink()
    os.mkfifo(git_repo / "pipe")  # git lists no untracked FIFO; a tracked path can become one
    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 0 and out["skipped"] == [{"path": "pipe", "reason": "unreadable", "bytes": 0}]


def test_a_symlink_out_of_the_repository_is_skipped_not_followed(
    tmp_path: Path, git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "creds.txt").write_text(f"KEY={key}\n")
    os.symlink(outside / "creds.txt", git_repo / "creds.txt")
    os.symlink(outside, git_repo / "linked")
    commit_all(run_git, git_repo, "links")
    os.symlink(outside / "creds.txt", git_repo / "untracked-link")

    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 0 and out["findings"] == []
    assert {(s["path"], s["reason"]) for s in out["skipped"]} == {
        ("creds.txt", "symlink"), ("linked", "symlink"), ("untracked-link", "symlink")}  # fmt: skip


def test_staged_sees_a_staged_secret_not_an_unstaged_one(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    old, staged, unstaged = fake_aws_key(), fake_aws_key(), fake_aws_key()
    (git_repo / "app.py").write_text(f'OLD = "{old}"\n')
    commit_all(run_git, git_repo, "old")
    (git_repo / "app.py").write_text(f'OLD = "{old}"\nNEW = "{staged}"\n')
    run_git(git_repo, "add", "app.py")
    (git_repo / "app.py").write_text(f'OLD = "{old}"\nNEW = "{staged}"\nMORE = "{unstaged}"\n')
    (git_repo / "loose.py").write_text(f'L = "{unstaged}"\n')

    code, out = scan_json(run_oms, ["--staged"], cwd=git_repo)  # as a pre-commit hook runs it
    assert code == 3
    assert found_at(out) == {("app.py", fp(staged))}  # HEAD's secret is not reported again
    assert {f["line"] for f in out["findings"]} == {2}

    run_git(git_repo, "commit", "-q", "-m", "staged")
    code, out = scan_json(run_oms, ["--staged"], cwd=git_repo)
    assert code == 0 and out["findings"] == []


def test_staged_before_the_first_commit_is_everything_staged(
    tmp_path: Path, oms_env: dict[str, str], run_git: RunGit, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    repo = tmp_path / "fresh"
    repo.mkdir()
    run_git(repo, "init", "-q", "-b", "main")
    (repo / "first.py").write_text(f'K = "{key}"\n')
    run_git(repo, "add", "first.py")
    code, out = scan_json(run_oms, ["--staged"], cwd=repo)
    assert code == 3 and found_at(out) == {("first.py", fp(key))}
    code, out = scan_json(run_oms, ["--history"], cwd=repo)
    assert code == 2 and "no commit yet" in out["error"]["message"]


def test_history_finds_a_removed_secret_and_one_in_the_root_commit(
    tmp_path: Path, oms_env: dict[str, str], run_git: RunGit, run_oms: RunOms
) -> None:
    in_root, removed = fake_aws_key(), fake_aws_key()
    repo = make_repo(tmp_path / "h", {"root.py": f'R = "{in_root}"\n'}, env=oms_env)
    root = run_git(repo, "rev-parse", "HEAD").strip()
    (repo / "root.py").write_text("R = None\n")
    (repo / "cfg.py").write_text(f'\n\nC = "{removed}"\n')
    leak = commit_all(run_git, repo, "leak")
    (repo / "cfg.py").unlink()
    gone = commit_all(run_git, repo, "remove it")
    code, out = scan_json(run_oms, [], cwd=repo)
    assert code == 0  # the tip holds neither

    code, out = scan_json(run_oms, ["--history"], cwd=repo)
    assert code == 3
    where = {(f["file"], f["line"], f["fingerprint"], f["commit"]) for f in out["findings"]}
    assert where == {("root.py", 1, fp(in_root), root), ("cfg.py", 3, fp(removed), leak)}
    code, out = scan_json(run_oms, ["--history", f"{root}..{gone}"], cwd=repo)
    assert code == 3 and {f["commit"] for f in out["findings"]} == {leak}
    code, out = scan_json(run_oms, ["--history", root], cwd=repo)  # REV: its own history
    assert code == 3 and {f["commit"] for f in out["findings"]} == {root}
    code, out = scan_json(run_oms, ["--history", f"{EMPTY_TREE}..{root}"], cwd=repo)
    assert code == 3 and {f["commit"] for f in out["findings"]} == {root}
    code, out = scan_json(run_oms, ["--history", "--staged"], cwd=repo)
    assert code == 2 and out["error"]["kind"] == "usage"


def test_grouped_output_and_its_allow_line_pasted_into_oms_toml_allows_the_finding(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    (git_repo / "a.py").write_text(f'A = "{key}"\n')
    (git_repo / "b.py").write_text(f'\n\nB = "{key}"\n')
    commit_all(run_git, git_repo, "twice")
    proc = run_oms(["scan"], cwd=git_repo)
    assert proc.returncode == 3
    lines = proc.stdout.splitlines()
    assert "aws-access-token (gitleaks)" in lines[0] and "(detect-secrets)" in lines[0]
    assert lines[1:4] == [f"  fingerprint {fp(key)}", "  a.py:1", "  b.py:3"]
    allow = f'allow_fingerprints = ["{fp(key)}"]'
    assert allow in lines and "under [scanners] in oms.toml" in proc.stdout
    assert key not in proc.stdout + proc.stderr

    (git_repo / "oms.toml").write_text(f"version = 1\n\n[scanners]\n{allow}\n")
    run_git(git_repo, "add", "oms.toml")
    code, out = scan_json(run_oms, ["--staged"], cwd=git_repo)  # the pasted hash is no secret
    assert code == 0 and out["findings"] == []
    run_git(git_repo, "commit", "-q", "-m", "allow it")
    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 0, [f for f in out["findings"] if not f["allowed"]]
    assert out["findings"] and all(f["allowed"] for f in out["findings"])
    assert "[allowed]" in run_oms(["scan"], cwd=git_repo).stdout
    other = fake_aws_key()  # a real secret in oms.toml is still one
    (git_repo / "oms.toml").write_text(f"version = 1\n# {other}\n\n[scanners]\n{allow}\n")
    code, out = scan_json(run_oms, [], cwd=git_repo)
    assert code == 3 and ("oms.toml", fp(other)) in found_at(out)
    assert {f["fingerprint"] for f in out["findings"] if not f["allowed"]} == {fp(other)}


def test_hostile_file_names_are_sanitised_in_human_output(
    git_repo: Path, run_git: RunGit, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    names = ["new\nline.py", "esc\x1b[31mred.py", "bidi\u202eyp.txt"]
    for name in names:
        (git_repo / name).write_text(f'K = "{key}"\n')
    fifo = git_repo / "fifo\x1b]0;title\x07"
    fifo.write_text("x\n")
    commit_all(run_git, git_repo, "names")
    fifo.unlink()
    os.mkfifo(fifo)
    proc = run_oms(["scan"], cwd=git_repo)
    assert proc.returncode == 3
    for raw in ("\x1b", "\u202e", "\x07", "new\nline"):
        assert raw not in proc.stdout
    for shown in ("new\\u000aline.py:1", "esc\\u001b[31mred.py:1", "bidi\\u202eyp.txt:1",
                  "fifo\\u001b]0;title\\u0007: unreadable"):  # fmt: skip
        assert shown in proc.stdout


def test_outside_a_repository_without_a_path_is_a_usage_error_saying_what_to_pass(
    tmp_path: Path, run_oms: RunOms
) -> None:
    code, out = scan_json(run_oms, [], cwd=tmp_path)
    assert code == 2 and out["error"]["kind"] == "usage"
    assert "give PATH" in out["error"]["message"] and "--stdin" in out["error"]["message"]
    code, out = scan_json(run_oms, ["--staged"], cwd=tmp_path)
    assert code == 2 and "not inside a git repository" in out["error"]["message"]


def test_paths_skip_binaries_and_symlinks_instead_of_failing(
    tmp_path: Path, run_oms: RunOms
) -> None:
    key = fake_aws_key()
    d = tmp_path / "d"
    d.mkdir()
    (d / "blob.bin").write_bytes(b"\0\0\x01" + key.encode())
    (d / "plain.txt").write_text(f"{key}\n")
    os.symlink(d / "plain.txt", d / "link.txt")
    code, out = scan_json(run_oms, [str(d)])
    assert code == 3 and {f["file"] for f in out["findings"]} == {str(d / "plain.txt")}
    assert {(Path(s["path"]).name, s["reason"]) for s in out["skipped"]} == {
        ("blob.bin", "binary"), ("link.txt", "symlink")}  # fmt: skip


def test_batches_split_a_large_scope_and_lose_nothing(
    tmp_path: Path, oms_home: Path, oms_env: dict[str, str], run_git: RunGit,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    keys = [fake_aws_key() for _ in range(3)]
    repo = make_repo(tmp_path / "b", {f"f{i}.py": f'K = "{k}"\n' for i, k in enumerate(keys)},
                     env=oms_env)  # fmt: skip
    (repo / "tool.bin").write_bytes(b"\0\1")
    (repo / "f1.py").write_text("K = None\n")
    commit_all(run_git, repo, "remove one")
    monkeypatch.setattr(sources, "BATCH_BYTES", 1)  # every file, every commit its own batch
    batches = list(sources.repo_files(open_repo(repo)))
    assert len([b for b in batches if b.items]) >= 4
    files = secrets.scan(repo, [], None, None, None)
    assert {(f.file, f.fingerprint) for f in files.findings} == {
        ("f0.py", fp(keys[0])), ("f2.py", fp(keys[2]))}  # fmt: skip
    assert [(s.path, s.reason) for s in files.skipped] == [("tool.bin", "binary")]
    history = secrets.scan(repo, [], None, None, None, history="HEAD")
    assert {f.fingerprint for f in history.findings} == {fp(k) for k in keys}
    assert history.commits is not None and len(set(history.commits)) == 1  # all in the root
    assert history.skipped == (sources.Skipped("tool.bin", "binary", 2),)
