"""The agent's workspace and its result (`gatekeeper/agent/workspace.py`), on real repositories.

`create_workspace` clones with oms' own git; `collect` reads a workspace the agent had
for itself as hostile ground. Each hostile vector is first shown to be live (plain git in
the workspace runs the planted program, which writes a marker), then collect must leave no
marker, commit the files' raw bytes and touch no ref of the user's but its own run ref.
The gate's side: `process-result` on `refs/oms/runs/<id>` judges from the base the run's
evidence recorded, `--base` overrides it, and a planted canary in a candidate blocks.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from support.markers import MarkerScripts
from support.oms import parse_single_json, run_oms
from support.repos import git, make_repo

import gatekeeper.agent.snapshot as snapshot
import gatekeeper.agent.workspace as workspace_module
import gatekeeper.mcp.tools.result as mcp_result
from evidence import Draft, EvidenceStore, state_root
from gatekeeper.agent.payloads import AgentRunEnd, AgentRunStart, EgressTotals, run_subject
from gatekeeper.agent.workspace import (
    Collected,
    Workspace,
    collect,
    create_workspace,
    new_run_id,
)
from gatekeeper.errors import Blocked, ConfigError, Unavailable, UsageError
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.scratch import SANDBOX_HOST_UID
from gatekeeper.scan.canary import plant_canary
from sandbox import Deadline

CHECK_POLICY = 'version = 1\n\n[[checks]]\nname = "true"\ncmd = ["/bin/true"]\ntimeout_s = 30\n'
DIGEST = "sha256:" + "0" * 64


@dataclass
class Lab(MarkerScripts):
    root: Path
    repo_dir: Path
    env: dict[str, str]
    markers: Path

    @property
    def repo(self) -> Repo:
        return open_repo(self.repo_dir)

    def user_git(self, *args: str) -> str:
        return git(self.repo_dir, *args, env=self.env).strip()

    def agent_git(self, ws: Workspace, *args: str, check: bool = True) -> str:
        """git as the agent runs it inside: in the workspace, under the workspace's config."""
        proc = subprocess.run(["git", "-C", str(ws.path), *args], capture_output=True,
                              env=self.env, check=False)  # fmt: skip
        if check:
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout.decode(errors="replace").strip()

    def refs(self) -> dict[str, str]:
        out = self.user_git("for-each-ref", "--format=%(refname) %(objectname)")
        return dict(line.split(" ") for line in out.splitlines())

    def oms(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], env=self.env, cwd=self.root, timeout=180)
        return proc.returncode, parse_single_json(proc) | {"_stdout": proc.stdout}


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    files = {"oms.toml": CHECK_POLICY, "app.py": "print('hi')\n", "run.sh": "#!/bin/sh\n",
             ".gitignore": "build/\n*.log\n", "keep.log": "tracked though ignored\n"}  # fmt: skip
    repo = make_repo(tmp_path / "repo", files, env=oms_env, symlinks={"link": "app.py"},
                     message="base")  # fmt: skip
    git(repo, "add", "-f", "keep.log", env=oms_env)
    os.chmod(repo / "run.sh", 0o755)
    git(repo, "add", "-A", env=oms_env)
    git(repo, "commit", "-q", "-m", "exec bit and a tracked ignored file", env=oms_env)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**oms_env, "OMS_WORK_DIR": str(tmp_path / "work")}
    return Lab(tmp_path, repo, env, markers)


def tree_of(lab: Lab, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, content) of a commit in the user's repository."""
    out = lab.user_git("ls-tree", "-r", "-z", "--full-tree", commit)
    tree = {}
    for rec in out.split("\0"):
        if rec:
            meta, _, path = rec.partition("\t")
            mode, _, oid = meta.split(" ")
            tree[path] = (mode, git(lab.repo_dir, "cat-file", "blob", oid, env=lab.env))
    return tree


# -- create ---------------------------------------------------------------------------------


def test_a_workspace_is_a_private_clone_of_the_whole_history_with_a_clean_status(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    head = lab.user_git("rev-parse", "HEAD")
    assert ws.base == head and ws.base_ref == "HEAD"
    assert ws.path.parent == lab.root / "work"
    assert stat.S_IMODE(os.stat(ws.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws.path.parent).st_mode) == 0o700
    assert lab.agent_git(ws, "status", "--porcelain", "--untracked-files=all") == ""
    assert lab.agent_git(ws, "log", "--format=%H") == lab.user_git("log", "--format=%H")
    assert lab.agent_git(ws, "symbolic-ref", "HEAD") == f"refs/heads/oms/{ws.run_id}"
    assert lab.agent_git(ws, "config", "user.name") == "oms agent"
    assert lab.agent_git(ws, "fsck", "--strict") == ""
    dotgit = ws.path / ".git"
    assert os.listdir(dotgit / "hooks") == []
    assert not (dotgit / "objects" / "info" / "alternates").exists()
    # The user's repository is named nowhere in the workspace's .git.
    for dirpath, _, names in os.walk(dotgit):
        for name in names:
            data = (Path(dirpath) / name).read_bytes()
            assert os.fsencode(lab.repo_dir) not in data, name
    assert os.readlink(ws.path / "link") == "app.py"
    assert os.stat(ws.path / "run.sh").st_mode & 0o100
    assert (ws.path / "keep.log").read_text() == "tracked though ignored\n"


def test_a_workspace_starts_at_the_named_base(lab: Lab) -> None:
    first = lab.user_git("rev-parse", "HEAD~1")
    ws = create_workspace(lab.repo, "HEAD~1", new_run_id())
    assert ws.base == first and ws.base_ref == "HEAD~1"
    assert lab.agent_git(ws, "rev-parse", "HEAD") == first
    assert not (ws.path / "keep.log").exists()


def test_files_are_written_as_data_not_through_the_trees_attributes(lab: Lab) -> None:
    (lab.repo_dir / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (lab.repo_dir / "a.txt").write_bytes(b"one\ntwo\n")
    lab.user_git("add", "-A")
    lab.user_git("commit", "-q", "-m", "crlf attributes")
    ws = create_workspace(lab.repo, None, new_run_id())
    assert (ws.path / "a.txt").read_bytes() == b"one\ntwo\n"
    assert collect(lab.repo, ws) == Collected(None, None, None)


def test_a_second_workspace_for_the_same_run_is_refused(lab: Lab) -> None:
    run = new_run_id()
    create_workspace(lab.repo, None, run)
    with pytest.raises(UsageError, match="exists already"):
        create_workspace(lab.repo, None, run)


# -- collect --------------------------------------------------------------------------------


def test_uncommitted_changes_are_committed_like_add_all_but_ignored_files_are_not(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('agent')\n")
    (ws.path / "new.txt").write_text("new\n")
    os.unlink(ws.path / "link")
    os.symlink("new.txt", ws.path / "newlink")
    (ws.path / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    os.chmod(ws.path / "tool.sh", 0o755)
    os.chmod(ws.path / "run.sh", 0o644)
    (ws.path / "keep.log").write_text("still tracked\n")
    (ws.path / "debug.log").write_text("ignored\n")
    (ws.path / "build").mkdir()
    (ws.path / "build" / "out.bin").write_bytes(b"\0ignored")
    (ws.path / 'we ird\n"name\\é').write_text("odd name\n")
    before = lab.refs()
    got = collect(lab.repo, ws)
    assert got.candidate is not None and got.candidate_ref == f"refs/oms/runs/{ws.run_id}"
    assert lab.user_git("rev-parse", got.candidate_ref) == got.candidate
    assert lab.refs() == {**before, got.candidate_ref: got.candidate}
    tree = tree_of(lab, got.candidate)
    assert tree["app.py"] == ("100644", "print('agent')\n")
    assert tree["new.txt"] == ("100644", "new\n")
    assert tree["newlink"] == ("120000", "new.txt")
    assert tree["tool.sh"][0] == "100755" and tree["run.sh"][0] == "100644"
    assert tree["keep.log"] == ("100644", "still tracked\n")
    assert tree['we ird\n"name\\é'] == ("100644", "odd name\n")
    assert "link" not in tree and "debug.log" not in tree and "build/out.bin" not in tree
    message = lab.user_git("log", "-1", "--format=%an <%ae>%n%s", got.candidate)
    want = f"oms agent run {ws.run_id}: uncommitted changes"
    assert message == f"oms agent <agent@oms.invalid>\n{want}"
    assert lab.user_git("rev-parse", f"{got.candidate}^") == ws.base
    assert got.diffstat is not None
    assert (got.diffstat.files, got.diffstat.insertions) == (8, 7)
    assert lab.user_git("fsck", "--strict", "--no-dangling") == ""


def test_files_turned_directories_and_back_are_committed(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    os.unlink(ws.path / "app.py")
    (ws.path / "app.py").mkdir()
    (ws.path / "app.py" / "inner.txt").write_text("now a directory\n")
    (ws.path / "pkg").mkdir()
    (ws.path / "pkg" / "mod.py").write_text("x = 1\n")
    lab.agent_git(ws, "add", "-A")
    lab.agent_git(ws, "commit", "-q", "-m", "a package")
    (ws.path / "pkg" / "mod.py").unlink()
    (ws.path / "pkg").rmdir()
    (ws.path / "pkg").write_text("now a file\n")
    got = collect(lab.repo, ws)
    assert got.candidate is not None
    tree = tree_of(lab, got.candidate)
    assert tree["app.py/inner.txt"] == ("100644", "now a directory\n")
    assert tree["pkg"] == ("100644", "now a file\n")
    assert "app.py" not in tree and "pkg/mod.py" not in tree


def test_the_users_head_index_and_config_are_untouched(lab: Lab) -> None:
    dotgit = lab.repo_dir / ".git"
    before = {name: (dotgit / name).read_bytes() for name in ("HEAD", "index", "config")}
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('y')\n")
    assert collect(lab.repo, ws).candidate is not None
    assert {name: (dotgit / name).read_bytes() for name in before} == before
    assert lab.user_git("status", "--porcelain") == ""


@pytest.mark.parametrize("where", ["inside the repository", "around the repository"])
def test_a_work_dir_overlapping_the_repository_is_refused(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    work = lab.repo_dir / "work" if where == "inside the repository" else lab.root
    monkeypatch.setenv("OMS_WORK_DIR", str(work))
    monkeypatch.setenv("OMS_HOME", str(lab.root.parent / f"{lab.root.name}-state"))
    with pytest.raises(ConfigError, match=r"and the repository .* overlap"):
        create_workspace(lab.repo, None, new_run_id())
    assert not (lab.repo_dir / "work").exists()


def test_the_agents_own_commits_are_kept_and_the_rest_committed_on_top(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('committed by the agent')\n")
    lab.agent_git(ws, "commit", "-q", "-am", "agent's own commit")
    agent_commit = lab.agent_git(ws, "rev-parse", "HEAD")
    (ws.path / "later.txt").write_text("left uncommitted\n")
    got = collect(lab.repo, ws)
    assert got.candidate is not None
    assert lab.user_git("rev-parse", f"{got.candidate}^") == agent_commit
    assert lab.user_git("log", "-1", "--format=%s", agent_commit) == "agent's own commit"
    assert "later.txt" in tree_of(lab, got.candidate)


def test_only_committed_work_needs_no_extra_commit(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('x')\n")
    lab.agent_git(ws, "commit", "-q", "-am", "done")
    assert collect(lab.repo, ws).candidate == lab.agent_git(ws, "rev-parse", "HEAD")


def test_nothing_changed_gives_no_candidate_and_writes_nothing(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "debug.log").write_text("ignored only\n")
    before = lab.refs()
    packs = sorted(os.listdir(lab.repo.common_dir / "objects" / "pack"))
    assert collect(lab.repo, ws) == Collected(None, None, None)
    assert lab.refs() == before
    assert sorted(os.listdir(lab.repo.common_dir / "objects" / "pack")) == packs
    leftovers = [n for n in os.listdir(lab.repo.common_dir / "objects") if n.startswith("tmp_")]
    assert leftovers == [] and [n for n in os.listdir(ws.path.parent) if n != ws.run_id] == []


def test_a_result_written_once_is_not_written_again(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('x')\n")
    collect(lab.repo, ws)
    with pytest.raises(Blocked, match="exists already"):
        collect(lab.repo, ws)


@pytest.mark.parametrize("rewrite", ["reset to an older commit", "amend the base", "orphan"])
def test_rewritten_history_is_blocked_and_no_ref_is_written(lab: Lab, rewrite: str) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    if rewrite == "reset to an older commit":
        lab.agent_git(ws, "reset", "-q", "--hard", "HEAD~1")
    elif rewrite == "amend the base":
        (ws.path / "app.py").write_text("print('amended')\n")
        lab.agent_git(ws, "commit", "-q", "--amend", "-am", "rewritten base")
    else:
        lab.agent_git(ws, "checkout", "-q", "--orphan", "fresh")
        lab.agent_git(ws, "commit", "-q", "-m", "no history")
    before = lab.refs()
    with pytest.raises(Blocked, match="rewrote history"):
        collect(lab.repo, ws)
    assert lab.refs() == before


def test_symlinks_are_committed_as_links_never_followed(lab: Lab) -> None:
    outside = lab.root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host file\n")
    ws = create_workspace(lab.repo, None, new_run_id())
    os.symlink(outside, ws.path / "dirlink")
    os.symlink(outside / "secret.txt", ws.path / "filelink")
    os.unlink(ws.path / "app.py")
    os.symlink(outside / "secret.txt", ws.path / "app.py")  # a tracked file turned link
    got = collect(lab.repo, ws)
    assert got.candidate is not None
    tree = tree_of(lab, got.candidate)
    assert tree["dirlink"] == ("120000", str(outside))
    assert tree["filelink"] == ("120000", str(outside / "secret.txt"))
    assert tree["app.py"] == ("120000", str(outside / "secret.txt"))
    assert not any(path.startswith("dirlink/") for path in tree)
    assert all("host file" not in content for _, content in tree.values())


def test_special_files_and_nested_repositories_are_not_committed(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    os.mkfifo(ws.path / "pipe")  # reading it would hang: it is never opened
    os.unlink(ws.path / "app.py")
    os.mkfifo(ws.path / "app.py")  # a tracked file turned FIFO: gone from the tree
    nested = ws.path / "vendor"
    nested.mkdir()
    git(nested, "init", "-q", env=lab.env)
    (nested / "lib.txt").write_text("nested\n")
    (ws.path / "real.txt").write_text("real\n")
    got = collect(lab.repo, ws)
    assert got.candidate is not None
    tree = tree_of(lab, got.candidate)
    assert "real.txt" in tree
    assert "pipe" not in tree and "app.py" not in tree
    assert not any(path.startswith("vendor") for path in tree)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    with open(ws.path / "huge.bin", "wb") as f:
        f.truncate(snapshot.MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(Blocked, match=r"huge\.bin in the workspace is larger than oms collects"):
        collect(lab.repo, ws)


def test_an_unwritable_object_store_is_unavailable_and_writes_no_ref(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('x')\n")

    real_mkdtemp = tempfile.mkdtemp

    def denied(*args: Any, **kwargs: Any) -> str:
        if Path(kwargs.get("dir", "")) == lab.repo.common_dir / "objects":
            raise PermissionError(13, "Permission denied")
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(workspace_module.tempfile, "mkdtemp", denied)
    with pytest.raises(Unavailable, match="cannot write the run's objects"):
        collect(lab.repo, ws)
    assert f"refs/oms/runs/{ws.run_id}" not in lab.refs()


# -- hostile workspaces ---------------------------------------------------------------------

Plant = Callable[[Lab, Workspace], None]


def _plant_hooks(lab: Lab, ws: Workspace) -> None:
    for name in ("pre-commit", "post-commit", "reference-transaction", "post-index-change",
                 "commit-msg", "prepare-commit-msg"):  # fmt: skip
        os.symlink(lab.marker_script(f"hook-{name}"), ws.path / ".git" / "hooks" / name)


def _plant_hooks_path(lab: Lab, ws: Workspace) -> None:
    hooks = lab.root / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-commit", "reference-transaction"):
        os.symlink(lab.marker_script(f"hookspath-{name}"), hooks / name)
    lab.agent_git(ws, "config", "core.hooksPath", str(hooks))


def _plant_fsmonitor(lab: Lab, ws: Workspace) -> None:
    lab.agent_git(ws, "config", "core.fsmonitor", str(lab.marker_script("fsmonitor")))


def _plant_clean_filter(lab: Lab, ws: Workspace) -> None:
    script = lab.marker_script("filter", tail="echo FILTERED")
    lab.agent_git(ws, "config", "filter.evil.clean", str(script))
    lab.agent_git(ws, "config", "filter.evil.smudge", str(script))
    (ws.path / ".gitattributes").write_text("* filter=evil\n")


def _plant_process_filter(lab: Lab, ws: Workspace) -> None:
    lab.agent_git(ws, "config", "filter.proc.process", str(lab.marker_script("process-filter")))
    (ws.path / ".git" / "info" / "attributes").write_text("* filter=proc\n")


def _plant_gpg(lab: Lab, ws: Workspace) -> None:
    lab.agent_git(ws, "config", "gpg.program", str(lab.marker_script("gpg")))
    lab.agent_git(ws, "config", "commit.gpgSign", "true")


def _plant_textconv(lab: Lab, ws: Workspace) -> None:
    lab.agent_git(ws, "config", "diff.evil.textconv", str(lab.marker_script("textconv")))
    (ws.path / ".git" / "info" / "attributes").write_text("* diff=evil\n")


def _live(lab: Lab, ws: Workspace) -> None:
    """What an agent's own git does with the planted set-up: status, diff, a commit."""
    (ws.path / "probe.txt").write_text("probe\n")
    lab.agent_git(ws, "status", "--porcelain", check=False)
    lab.agent_git(ws, "add", "-A", check=False)
    lab.agent_git(ws, "diff", "--cached", "--stat", check=False)
    lab.agent_git(ws, "diff", "--cached", check=False)
    lab.agent_git(ws, "commit", "-q", "-m", "probe", check=False)
    lab.agent_git(ws, "reset", "-q", "--hard", ws.base, check=False)
    os.unlink(ws.path / "probe.txt") if (ws.path / "probe.txt").exists() else None


VECTORS: dict[str, Plant] = {
    "hooks in .git/hooks": _plant_hooks,
    "core.hooksPath": _plant_hooks_path,
    "core.fsmonitor": _plant_fsmonitor,
    ".gitattributes clean filter": _plant_clean_filter,
    "info/attributes process filter": _plant_process_filter,
    "gpg.program with commit.gpgSign": _plant_gpg,
    "diff textconv": _plant_textconv,
}


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_collect_runs_nothing_the_workspace_names(lab: Lab, vector: str) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    VECTORS[vector](lab, ws)
    _live(lab, ws)
    assert lab.ran(), f"{vector}: the vector is not live; the agent's git did not run it"
    lab.clear()
    (ws.path / "app.py").write_text("print('raw bytes')\n")
    (ws.path / "fresh.txt").write_text("untracked\n")
    got = collect(lab.repo, ws)
    assert lab.ran() == [], f"{vector}: collect ran the workspace's program"
    assert got.candidate is not None
    tree = tree_of(lab, got.candidate)
    assert tree["app.py"][1] == "print('raw bytes')\n" and tree["fresh.txt"][1] == "untracked\n"


def test_the_workspace_index_cannot_hide_a_change(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    lab.agent_git(ws, "update-index", "--skip-worktree", "app.py")
    lab.agent_git(ws, "update-index", "--assume-unchanged", "run.sh")
    (ws.path / "app.py").write_text("print('hidden by skip-worktree')\n")
    (ws.path / "run.sh").write_text("#!/bin/sh\necho hidden by assume-unchanged\n")
    assert lab.agent_git(ws, "status", "--porcelain") == ""  # live: git inside sees nothing
    got = collect(lab.repo, ws)
    assert got.candidate is not None
    tree = tree_of(lab, got.candidate)
    assert tree["app.py"][1] == "print('hidden by skip-worktree')\n"
    assert tree["run.sh"] == ("100755", "#!/bin/sh\necho hidden by assume-unchanged\n")


# -- the lstat stamps taken at creation: unread when untouched, hashed whenever in doubt -------


def fenced(ws: Workspace) -> Workspace:
    """`ws` with its stamps' fence taken again once the kernel's clock has ticked past every
    stamp's ctime (a file made in the work dir until its ctime is later): the stamps as a
    slower creation would have left them, nothing in the workspace touched in between."""
    assert ws.stamps is not None
    newest = max(st[3] for st in ws.stamps.files.values())
    while True:
        with tempfile.NamedTemporaryFile(dir=ws.path.parent) as fh:
            fence = os.fstat(fh.fileno()).st_ctime_ns
        if fence > newest:
            return replace(ws, stamps=snapshot.Stamps(ws.stamps.files, fence))


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes collect hashes (every blob id it computes)."""
    seen: list[bytes] = []
    real = snapshot.blob_id

    def counting(data: bytes, oid_len: int) -> str:
        seen.append(data)
        return real(data, oid_len)

    monkeypatch.setattr(snapshot, "blob_id", counting)
    return seen


def rewrite_same_size(path: Path, data: bytes) -> None:
    """New bytes of the same length into the same inode, the way an editor saving in place does."""
    assert len(data) == path.stat().st_size
    with open(path, "r+b") as fh:
        fh.write(data)


def test_files_oms_wrote_and_nobody_touched_are_not_read_at_collect(
    lab: Lab, hashed: list[bytes]
) -> None:
    ws = fenced(create_workspace(lab.repo, None, new_run_id()))
    assert collect(lab.repo, ws) == Collected(None, None, None)
    assert hashed == []  # every tracked file was its stamp: none was read
    (ws.path / "app.py").write_text("print('changed')\n")
    got = collect(lab.repo, replace(ws, run_id=new_run_id()))
    assert hashed == [b"print('changed')\n"]  # the one file whose lstat moved, only
    assert got.candidate is not None and tree_of(lab, got.candidate)["app.py"][1] == (
        "print('changed')\n"
    )


def test_a_rewrite_in_the_stamps_own_clock_tick_is_hashed(lab: Lab, hashed: list[bytes]) -> None:
    """The coarse-timestamp case: rewritten within the clock tick of its stamp, same size, the
    file's lstat is its stamp in every field. Shown here at its worst (the stamp taken after
    the rewrite, the fence in that same tick): a stamp not before the fence is doubt, hashed."""
    ws = create_workspace(lab.repo, None, new_run_id())
    rewrite_same_size(ws.path / "app.py", b"print('HI')\n")
    st = os.lstat(ws.path / "app.py")
    assert ws.stamps is not None
    files = {**ws.stamps.files, b"app.py": snapshot._stamp(st)}
    ws = replace(ws, stamps=snapshot.Stamps(files, st.st_ctime_ns))
    got = collect(lab.repo, ws)
    assert b"print('HI')\n" in hashed
    assert got.candidate is not None and tree_of(lab, got.candidate)["app.py"][1] == (
        "print('HI')\n"
    )


def test_content_changed_and_mtime_set_back_with_touch_is_hashed(lab: Lab) -> None:
    """The `touch -d` case: same size, same inode, the mtime put back to its stamp's; the ctime
    the agent cannot set gives it away."""
    ws = fenced(create_workspace(lab.repo, None, new_run_id()))
    before = os.lstat(ws.path / "app.py")
    rewrite_same_size(ws.path / "app.py", b"print('HO')\n")
    secs, ns = divmod(before.st_mtime_ns, 10**9)
    subprocess.run(["touch", "-m", "-d", f"@{secs}.{ns:09d}", str(ws.path / "app.py")],
                   check=True)  # fmt: skip
    after = os.lstat(ws.path / "app.py")
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns, before.st_size, before.st_ino)  # fmt: skip
    got = collect(lab.repo, ws)
    assert got.candidate is not None and tree_of(lab, got.candidate)["app.py"][1] == (
        "print('HO')\n"
    )


def test_the_workspaces_own_info_exclude_does_not_hide_a_new_file(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / ".git" / "info" / "exclude").write_text("hidden.txt\n")
    (ws.path / "hidden.txt").write_text("excluded by the agent's own info/exclude\n")
    assert lab.agent_git(ws, "status", "--porcelain") == ""  # live: git inside ignores it
    got = collect(lab.repo, ws)
    assert got.candidate is not None and "hidden.txt" in tree_of(lab, got.candidate)


def test_a_head_branch_in_packed_refs_is_found(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('packed')\n")
    lab.agent_git(ws, "commit", "-q", "-am", "then pack-refs")
    lab.agent_git(ws, "pack-refs", "--all")
    assert not (ws.path / ".git" / "refs" / "heads" / "oms" / ws.run_id).exists()
    assert collect(lab.repo, ws).candidate == lab.agent_git(ws, "rev-parse", "HEAD")


def test_the_users_hooks_and_config_do_not_run_when_the_run_ref_is_written(lab: Lab) -> None:
    hook = lab.repo_dir / ".git" / "hooks" / "reference-transaction"
    os.symlink(lab.marker_script("user-hook"), hook)
    lab.user_git("config", "core.fsmonitor", str(lab.marker_script("user-fsmonitor")))
    lab.user_git("update-ref", "refs/heads/live", "HEAD")
    lab.user_git("status", "--porcelain")
    assert lab.ran(), "the user's hooks are not live"
    lab.clear()
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('y')\n")
    assert collect(lab.repo, ws).candidate is not None
    assert lab.ran() == []


@pytest.mark.parametrize("name", ["alternates", "http-alternates"])
def test_a_workspace_naming_other_object_stores_is_refused(lab: Lab, name: str) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('x')\n")
    target = lab.repo.common_dir / "objects"
    (ws.path / ".git" / "objects" / "info" / name).write_text(f"{target}\n")
    with pytest.raises(Blocked, match=f"objects/info/{name} names other object stores"):
        collect(lab.repo, ws)
    assert f"refs/oms/runs/{ws.run_id}" not in lab.refs()


def _loose(ws: Workspace, oid: str) -> Path:
    return ws.path / ".git" / "objects" / oid[:2] / oid[2:]


def test_an_object_whose_bytes_are_not_its_name_is_refused(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('honest')\n")
    lab.agent_git(ws, "commit", "-q", "-am", "honest commit")
    honest = lab.agent_git(ws, "rev-parse", "HEAD:app.py")
    other = subprocess.run(["git", "-C", str(ws.path), "hash-object", "-w", "--stdin"],
                           input=b"print('swapped')\n", capture_output=True, env=lab.env,
                           check=True).stdout.decode().strip()  # fmt: skip
    os.unlink(_loose(ws, honest))
    _loose(ws, honest).write_bytes(_loose(ws, other).read_bytes())
    assert lab.agent_git(ws, "cat-file", "blob", honest) == "print('swapped')"  # live
    before = lab.refs()
    with pytest.raises(Blocked, match="index-pack --strict"):
        collect(lab.repo, ws)
    assert lab.refs() == before
    probe = subprocess.run(["git", "-C", str(lab.repo_dir), "cat-file", "-e", honest],
                           env=lab.env, check=False)  # fmt: skip
    assert probe.returncode != 0, "the swapped object reached the user's repository"


def test_a_commit_git_fsck_rejects_is_refused(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    tree = lab.agent_git(ws, "rev-parse", "HEAD^{tree}")
    raw = (f"tree {tree}\nparent {ws.base}\nauthor no email 1700000000 +0000\n"
           f"committer no email 1700000000 +0000\n\nmalformed\n").encode()  # fmt: skip
    bad = subprocess.run(["git", "-C", str(ws.path), "hash-object", "-t", "commit", "-w",
                          "--literally", "--stdin"], input=raw, capture_output=True,
                         env=lab.env, check=True).stdout.decode().strip()  # fmt: skip
    lab.agent_git(ws, "update-ref", f"refs/heads/oms/{ws.run_id}", bad)
    with pytest.raises(Blocked, match="index-pack --strict"):
        collect(lab.repo, ws)
    assert f"refs/oms/runs/{ws.run_id}" not in lab.refs()


def test_a_result_packing_larger_than_the_limit_is_refused(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "big.txt").write_text("".join(f"line {i}\n" for i in range(20_000)))
    monkeypatch.setattr(workspace_module, "MAX_PACK_BYTES", 4096)
    with pytest.raises(Blocked, match="index-pack --strict"):
        collect(lab.repo, ws)
    assert f"refs/oms/runs/{ws.run_id}" not in lab.refs()


def test_a_symlink_in_the_object_store_is_refused(lab: Lab) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    pack = ws.path / ".git" / "objects" / "pack"
    os.symlink(lab.repo.common_dir / "objects" / "pack", pack / "elsewhere")
    with pytest.raises(Blocked, match="symlink"):
        collect(lab.repo, ws)


HEADS: dict[str, Callable[[Path], None]] = {
    "HEAD a symlink": lambda g: (os.unlink(g / "HEAD"), os.symlink("refs/heads/x", g / "HEAD")),
    "HEAD to a tag": lambda g: (g / "HEAD").write_text("ref: refs/tags/v1\n"),
    "HEAD garbage": lambda g: (g / "HEAD").write_text("hello\n"),
    "HEAD to a missing branch": lambda g: (g / "HEAD").write_text("ref: refs/heads/gone\n"),
    "HEAD to ../": lambda g: (g / "HEAD").write_text("ref: refs/heads/../../config\n"),
    ".git a gitfile": lambda g: (
        os.rename(g, g.with_name("moved")),
        g.write_text(f"gitdir: {g.with_name('moved')}\n"),
    ),
}


@pytest.mark.parametrize("shape", sorted(HEADS))
def test_odd_workspace_heads_are_refused(lab: Lab, shape: str) -> None:
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('x')\n")
    HEADS[shape](ws.path / ".git")
    with pytest.raises(Blocked):
        collect(lab.repo, ws)
    assert f"refs/oms/runs/{ws.run_id}" not in lab.refs()


def test_a_workspace_handed_to_the_sandbox_uid_is_collected(lab: Lab) -> None:
    if os.geteuid() != 0:
        pytest.skip("as non-root the workspace stays with the user: nothing to hand over")
    ws = create_workspace(lab.repo, None, new_run_id())
    for dirpath, dirnames, filenames in os.walk(ws.path):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), SANDBOX_HOST_UID, SANDBOX_HOST_UID)
    os.lchown(ws.path, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
    (ws.path / "app.py").write_text("print('as the sandbox uid')\n")
    assert collect(lab.repo, ws).candidate is not None


# -- the gate: recorded base, canary ---------------------------------------------------------


def _init(lab: Lab) -> None:
    code, out = lab.oms("init", "--repo", str(lab.repo_dir))
    assert code == 0, out


def record_run(lab: Lab, ws: Workspace, base: str, got: Collected | None = None) -> None:
    store = EvidenceStore.open(state_root(), lab.repo.repo_id, common_dir=lab.repo.common_dir)
    start = AgentRunStart(run_id=ws.run_id, agent="command", cli_version=None,
                          argv_digest=DIGEST, profile_digest=DIGEST, mountinfo_digest=DIGEST,
                          namespaces_digest=DIGEST, probe="passed", base=base,
                          base_ref=ws.base_ref, workspace=str(ws.path), egress="none",
                          canary_digest=DIGEST)  # fmt: skip
    drafts = [Draft.of(start, subject=run_subject(ws.run_id))]
    if got is not None:
        end = AgentRunEnd(run_id=ws.run_id, exit_code=0, signal=None, duration_s=0.1,
                          egress=EgressTotals(), base=base, candidate=got.candidate,
                          candidate_ref=got.candidate_ref, diffstat=got.diffstat)  # fmt: skip
        drafts.append(Draft.of(end, subject=run_subject(ws.run_id)))
    store.append_many(drafts)


def test_process_result_on_a_run_ref_judges_from_the_recorded_base(lab: Lab) -> None:
    _init(lab)
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('agent')\n")
    got = collect(lab.repo, ws)
    assert got.candidate_ref is not None
    older = lab.user_git("rev-parse", "HEAD~1")  # on the default branch, an ancestor
    # No evidence of the run yet: refused, never judged against some other base.
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref)  # fmt: skip
    assert code == 2 and out["error"]["kind"] == "not_found", out
    assert ws.run_id in out["error"]["message"]
    record_run(lab, ws, older, got)
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref)  # fmt: skip
    assert code == 0 and out["decision"] == "READY_FOR_HUMAN", out
    assert out["base"] == older and out["commit"] == got.candidate
    # --base says otherwise: it wins, under the named base's rules.
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref, "--base", ws.base)  # fmt: skip
    assert code == 0 and out["base"] == ws.base, out
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref, "--base", got.candidate)  # fmt: skip
    assert code == 2 and "default branch" in out["error"]["message"], out


def test_a_run_started_off_the_default_branch_asks_for_a_base(lab: Lab) -> None:
    _init(lab)
    lab.user_git("checkout", "-q", "-b", "feature")
    (lab.repo_dir / "feature.txt").write_text("feature work\n")
    lab.user_git("add", "-A")
    lab.user_git("commit", "-q", "-m", "feature work")
    ws = create_workspace(lab.repo, "feature", new_run_id())
    (ws.path / "app.py").write_text("print('agent')\n")
    got = collect(lab.repo, ws)
    assert got.candidate_ref is not None
    record_run(lab, ws, ws.base, got)
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref)  # fmt: skip
    assert code == 2 and "default branch does not contain" in out["error"]["message"], out
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref, "--base", "main")  # fmt: skip
    assert code == 0 and out["base"] == lab.user_git("rev-parse", "main"), out


def test_a_run_whose_start_and_end_disagree_on_the_base_is_refused(lab: Lab) -> None:
    _init(lab)
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('agent')\n")
    got = collect(lab.repo, ws)
    record_run(lab, ws, ws.base)
    record_run(lab, ws, lab.user_git("rev-parse", "HEAD~1"), got)
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        f"refs/oms/runs/{ws.run_id}")  # fmt: skip
    assert code == 3 and out["error"]["kind"] == "tampered", out


def test_the_mcp_tool_takes_a_run_refs_base_from_evidence(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    _init(lab)
    ws = create_workspace(lab.repo, None, new_run_id())
    (ws.path / "app.py").write_text("print('agent')\n")
    got = collect(lab.repo, ws)
    older = lab.user_git("rev-parse", "HEAD~1")
    record_run(lab, ws, older, got)
    seen: list[str | None] = []

    class _Verdict:
        def to_json(self) -> dict[str, Any]:
            return {"checks": []}

    def fake_gate(top: Path, candidate: str, base: str | None, *_: Any, **__: Any) -> _Verdict:
        seen.append(base)
        return _Verdict()

    from gatekeeper.gates.result import pipeline  # what `_verdict` imports when called

    monkeypatch.setattr(pipeline, "process_result", fake_gate)
    ctx = mcp_result.ToolContext(lab.repo, None)  # type: ignore[arg-type]
    mcp_result._verdict(ctx, f"refs/oms/runs/{ws.run_id}", None, None)
    mcp_result._verdict(ctx, "main", None, None)
    assert seen == [older, None]


@pytest.mark.parametrize("where", ["file", "commit message"])
def test_a_candidate_holding_a_planted_canary_is_blocked(lab: Lab, where: str) -> None:
    _init(lab)
    run = new_run_id()
    token = plant_canary(run)
    ws = create_workspace(lab.repo, None, new_run_id())
    if where == "file":
        (ws.path / "notes.txt").write_text(f"found this: {token}\n")
    else:
        (ws.path / "app.py").write_text("print('x')\n")
        lab.agent_git(ws, "commit", "-q", "-am", f"exfil {token}")
    got = collect(lab.repo, ws)
    assert got.candidate_ref is not None
    record_run(lab, ws, ws.base, got)
    code, out = lab.oms("process-result", "--repo", str(lab.repo_dir), "--candidate",
                        got.candidate_ref)  # fmt: skip
    assert code == 3 and out["decision"] == "BLOCKED", out
    assert any(f"canary of agent run {run}" in r for r in out["reasons"]), out["reasons"]
    assert token not in out["_stdout"]
    log = (state_root() / "repos" / lab.repo.repo_id / "evidence" / "log.jsonl").read_text()
    assert token not in log


# -- oms' own walk finds what git finds ----------------------------------------------------

# shape -> (files written in the workspace, path -> content); the lab's base already ignores
# `build/` and `*.log` and tracks `keep.log`.
IGNORE_SHAPES: dict[str, dict[str, str]] = {
    "negation": {".gitignore": "*.tmp\n!keep.tmp\n", "a.tmp": "", "keep.tmp": ""},
    "directory pattern": {"build/x": "", "sub/build/y": "", "build2": "", "sub/buildz": ""},
    "anchored": {"sub/.gitignore": "/top.txt\n", "sub/top.txt": "", "sub/deep/top.txt": ""},
    "nested rules": {"sub/.gitignore": "*.tmp\n", "sub/a.tmp": "", "a.tmp": "",
                     "sub/deeper/b.tmp": "", "sub/deeper/c.txt": ""},
    "no re-include below an ignored dir": {".gitignore": "out/\n!out/keep\n", "out/keep": "",
                                           "in": ""},
    "double star": {".gitignore": "**/gen/*.c\n", "a/gen/x.c": "", "gen/y.c": "",
                    "a/gen/z.h": ""},
    "pathspec magic in a name": {".gitignore": "a\n", ":(top)a": "", "a": "", ":!x": ""},
    "odd bytes": {"sp ace": "", "new\nline": "", "tab\t.log": "", "ünï": ""},
    "a directory holding only ignored files": {"logs/a.log": "", "logs/b.log": "", "x": ""},
}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(IGNORE_SHAPES))
def test_the_walk_finds_the_untracked_files_git_finds(lab: Lab, shape: str) -> None:
    """Parity with `git ls-files --others --exclude-standard` (the workspace's own git, on a
    workspace of regular files only), which collect ran before and now never runs."""
    ws = create_workspace(lab.repo, None, new_run_id())
    for rel, content in IGNORE_SHAPES[shape].items():
        (ws.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.path / rel).write_text(content)
    listed = lab.agent_git(ws, "ls-files", "-z", "--others", "--exclude-standard")
    by_git = {p for p in listed.split("\0") if p and not p.endswith("/")}
    tracked = set(lab.user_git("ls-tree", "-r", "-z", "--name-only", ws.base).split("\0"))
    with snapshot.TempRepo.beside(lab.repo, ws.path, Deadline.after(60)) as t:
        found = snapshot.changes(t, ws.base)
    new = {os.fsdecode(p) for p, mode in found.found if mode is not None} - tracked
    assert new == by_git
    assert by_git  # each shape leaves something to find
    assert found.special == {}
