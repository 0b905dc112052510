"""The agent workspace's pure parts: where workspaces go, run ids, the workspace HEAD read as
data, fast-import path quoting, run refs, recorded bases and the per-run canaries."""

from __future__ import annotations

import os
import re
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from gatekeeper.agent.payloads import AgentRunStart
from gatekeeper.agent.records import recorded_base, run_of_ref
from gatekeeper.agent.snapshot import quote_path, workspace_head
from gatekeeper.agent.workspace import new_run_id, run_ref, work_root
from gatekeeper.errors import Blocked, ConfigError, UsageError
from gatekeeper.gates.result.stages import canary_reasons
from gatekeeper.repo.git import Repo
from gatekeeper.repo.refs import read_ref, write_ref
from gatekeeper.scan import ScanItem
from gatekeeper.scan.canary import canaries, canaries_in, canary_dir, canary_tokens, plant_canary

SHA = "a" * 40
OTHER = "b" * 40
RUN = "20261201T150000Z-0a1b2c3d"


# -- work_root --------------------------------------------------------------------------------


def test_work_root_is_oms_work_dir_then_xdg_data_home_then_the_home_default(
    tmp_path: Path,
) -> None:
    state = {"OMS_HOME": str(tmp_path / "state"), "HOME": str(tmp_path / "home")}
    both = {**state, "XDG_DATA_HOME": str(tmp_path / "data")}
    assert work_root({**both, "OMS_WORK_DIR": str(tmp_path / "w")}) == tmp_path / "w"
    assert work_root(both) == tmp_path / "data" / "oms" / "work"
    assert work_root(state) == tmp_path / "home" / ".local" / "share" / "oms" / "work"


@pytest.mark.parametrize("work", ["state/work", "state", "."])
def test_a_work_root_overlapping_the_state_root_is_refused(tmp_path: Path, work: str) -> None:
    env = {"OMS_HOME": str(tmp_path / "state"), "OMS_WORK_DIR": str(tmp_path / work)}
    with pytest.raises(ConfigError, match="overlap"):
        work_root(env)


def test_a_work_root_next_to_the_state_root_is_fine(tmp_path: Path) -> None:
    env = {"OMS_HOME": str(tmp_path / "state"), "OMS_WORK_DIR": str(tmp_path / "state-work")}
    assert work_root(env) == tmp_path / "state-work"


def test_a_symlinked_work_root_into_the_state_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    os.symlink(tmp_path / "state", tmp_path / "link")
    env = {"OMS_HOME": str(tmp_path / "state"), "OMS_WORK_DIR": str(tmp_path / "link" / "w")}
    with pytest.raises(ConfigError):
        work_root(env)


# -- run ids and refs -------------------------------------------------------------------------


def test_run_ids_are_utc_time_and_eight_random_hex_digits() -> None:
    pattern = AgentRunStart.model_fields["run_id"].metadata[0].pattern
    now = datetime(2026, 12, 1, 16, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    ids = {new_run_id(now) for _ in range(20)}
    assert all(re.match(pattern, i) and i.startswith("20261201T150000Z-") for i in ids)
    assert len(ids) == 20
    assert new_run_id(datetime(2026, 1, 2, 3, 4, 5)).startswith("20260102T030405Z-")
    assert re.match(pattern, new_run_id())
    assert new_run_id().startswith(datetime.now(UTC).strftime("%Y%m%d"))


def test_run_refs_take_only_run_ids() -> None:
    assert run_ref(RUN) == f"refs/oms/runs/{RUN}"
    for bad in ("../x", "a/b", "x..y", "", "abc", RUN + "/x", RUN.upper()):
        with pytest.raises(UsageError):
            run_ref(bad)


def _fake_repo(tmp_path: Path) -> Repo:
    common = tmp_path / "git"
    (common / "refs" / "heads").mkdir(parents=True)
    (common / "HEAD").write_text("ref: refs/heads/main\n")
    return Repo(tmp_path, common, "rtest", common)


def test_write_ref_writes_a_run_ref_and_no_other_ref_outside_refs_heads(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path)
    write_ref(repo, f"refs/oms/runs/{RUN}", SHA, None, "run")
    assert read_ref(repo, f"refs/oms/runs/{RUN}") == SHA
    others = ("refs/oms/runs/x", "refs/oms/other", "refs/tags/v1", f"refs/oms/runs/{RUN}/x",
              "refs/notes/commits", "refs/notes/oms/x")  # fmt: skip
    for ref in others:
        with pytest.raises(UsageError, match="not a branch, agent run or notes ref"):
            write_ref(repo, ref, SHA, None, "no")
    with pytest.raises(Blocked):
        write_ref(repo, f"refs/oms/runs/{RUN}", OTHER, None, "twice")


def test_only_run_refs_have_a_recorded_base(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path)  # no evidence store at all: nothing may be opened
    for ref in ("main", "refs/heads/main", "HEAD", f"refs/oms/runs/{RUN}x", f"runs/{RUN}"):
        assert recorded_base(repo, ref) is None
    assert run_of_ref(repo, f"refs/oms/runs/{RUN}") == RUN
    # `oms/runs/<id>` is the run's only when git would resolve it to the run ref.
    assert run_of_ref(repo, f"oms/runs/{RUN}") is None
    write_ref(repo, f"refs/oms/runs/{RUN}", SHA, None, "run")
    assert run_of_ref(repo, f"oms/runs/{RUN}") == RUN


# -- the workspace HEAD, read as data ---------------------------------------------------------


def _dotgit(tmp_path: Path, head: str) -> Path:
    g = tmp_path / ".git"
    (g / "refs" / "heads" / "oms").mkdir(parents=True)
    (g / "HEAD").write_text(head)
    return g


def test_head_may_be_a_commit_id_or_a_loose_or_packed_branch(tmp_path: Path) -> None:
    g = _dotgit(tmp_path, f"{SHA}\n")
    assert workspace_head(g) == SHA
    (g / "HEAD").write_text("ref: refs/heads/oms/run\n")
    (g / "refs" / "heads" / "oms" / "run").write_text(f"{OTHER}\n")
    assert workspace_head(g) == OTHER
    (g / "HEAD").write_text("ref: refs/heads/packed\n")
    (g / "packed-refs").write_text(f"# pack-refs with: peeled\n{SHA} refs/heads/packed\n")
    assert workspace_head(g) == SHA


ODD = {
    "garbage": "hello\n",
    "a tag": "ref: refs/tags/v1\n",
    "outside refs/heads": "ref: refs/oms/x\n",
    "dot dot": "ref: refs/heads/../../config\n",
    "a missing branch": "ref: refs/heads/gone\n",
    "a short id": "abc123\n",
    "two lines": f"{SHA}\n{SHA}\n",
    "a branch that is itself symbolic": "ref: refs/heads/sym\n",
    "a branch holding no id": "ref: refs/heads/junk\n",
}


@pytest.mark.parametrize("shape", sorted(ODD))
def test_odd_heads_are_blocked(tmp_path: Path, shape: str) -> None:
    g = _dotgit(tmp_path, ODD[shape])
    (g / "refs" / "heads" / "sym").write_text("ref: refs/heads/oms/run\n")
    (g / "refs" / "heads" / "junk").write_text("not an id\n")
    (g / "refs" / "heads" / "oms" / "run").write_text(f"{SHA}\n")
    with pytest.raises(Blocked):
        workspace_head(g)


@pytest.mark.parametrize("what", ["HEAD", "branch", "branch dir"])
def test_symlinks_in_heads_way_are_blocked(tmp_path: Path, what: str) -> None:
    g = _dotgit(tmp_path, "ref: refs/heads/oms/run\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "run").write_text(f"{SHA}\n")
    if what == "HEAD":
        os.unlink(g / "HEAD")
        os.symlink(outside / "run", g / "HEAD")
    elif what == "branch":
        os.symlink(outside / "run", g / "refs" / "heads" / "oms" / "run")
    else:
        os.rmdir(g / "refs" / "heads" / "oms")
        os.symlink(outside, g / "refs" / "heads" / "oms")
    with pytest.raises(Blocked):
        workspace_head(g)


def test_a_fifo_head_is_blocked_without_blocking(tmp_path: Path) -> None:
    g = _dotgit(tmp_path, "")
    os.unlink(g / "HEAD")
    os.mkfifo(g / "HEAD")
    with pytest.raises(Blocked):
        workspace_head(g)


def test_paths_are_quoted_for_fast_import_whatever_their_bytes() -> None:
    assert quote_path(b"plain/name.txt") == b'"plain/name.txt"'
    assert quote_path(b'a "q" \\ b') == b'"a \\"q\\" \\\\ b"'
    assert quote_path(b"new\nline\t\x7f\xc3\xa9") == b'"new\\012line\\011\\177\\303\\251"'


# -- canaries ---------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_planted_canary_is_a_private_file_of_one_random_token(state: Path) -> None:
    assert canary_tokens() == [] and canaries() == {}
    token = plant_canary(RUN)
    assert re.fullmatch(r"oms-canary-[0-9a-f]{32}", token)
    path = canary_dir() / RUN
    assert path.read_text() == token + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(canary_dir().stat().st_mode) == 0o700
    other = plant_canary("20261201T150001Z-00000000")
    assert other != token and sorted(canary_tokens()) == sorted([token, other])
    assert canaries()[RUN] == token


def test_files_that_are_not_canaries_are_not_tokens(state: Path) -> None:
    token = plant_canary(RUN)
    (canary_dir() / "junk").write_text("not a token\n")
    (canary_dir() / ".hidden").write_text(token + "\n")
    os.symlink(canary_dir() / RUN, canary_dir() / "alias")
    os.mkfifo(canary_dir() / "fifo")
    assert canaries() == {RUN: token}
    with pytest.raises(UsageError):
        plant_canary("../escape")


def test_the_gate_names_the_canarys_run_never_its_value(state: Path) -> None:
    token = plant_canary(RUN)
    items = [ScanItem.whole("clean.txt", "nothing here\n"),
             ScanItem.whole("notes.md", f"line one\nsee {token} here\n")]  # fmt: skip
    reasons = canary_reasons(items)
    assert reasons == [f"canary of agent run {RUN} found in notes.md: the agent reached oms' state"]
    assert token not in reasons[0]
    assert canaries_in("nothing", canaries()) == []


def test_without_canaries_the_gate_adds_nothing(state: Path) -> None:
    assert canary_reasons([ScanItem.whole("a", "oms-canary-" + "0" * 32)]) == []


def test_a_token_is_found_among_many_planted_runs_and_inside_longer_text(state: Path) -> None:
    runs = [f"20261201T1500{i:02d}Z-0000000{i % 10}" for i in range(30)]
    tokens = {run: plant_canary(run) for run in runs}
    planted = canaries()
    assert canaries_in(f"x{tokens[runs[7]]}ffff and {tokens[runs[29]]}", planted) == [
        runs[7],
        runs[29],
    ]
    assert canaries_in("oms-canary-" + "0" * 32, planted) == []
