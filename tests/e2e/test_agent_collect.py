"""Collect is bounded and never trusts file types (issue 29), through the real `oms agent run`.

The agent (real bwrap) leaves a FIFO, a unix socket or a device node where git would open
one: `.gitignore`, `.gitattributes`, a nested directory's `.gitignore`, a tracked file.
Before, a FIFO `.gitignore` made collect's git block on it for ever and `agent.run.end` was
never written. Each case shows the command ran (start and end markers), that the run ends
(the subprocess is bounded: a hang fails the test, no time is asserted), that the special
file is recorded in the JSON and in `agent.run.end` and absent from the candidate, and
that the end entry says why the run ended. The device is the whiteout node (char 0:0), the
one device a user namespace may create; if a kernel refuses it, that case is skipped.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import git

import gatekeeper.agent.workspace as workspace_module
from gatekeeper.agent import run as agent_run_module
from gatekeeper.agent.collect_deadline import CollectTimeout, killed_at
from gatekeeper.agent.payloads import AgentRunEnd
from gatekeeper.agent.run import AgentRunRequest
from gatekeeper.cli.evidence_log import log_rows
from gatekeeper.errors import Blocked
from gatekeeper.gates.records import init, open_store
from sandbox import Deadline

OmsJson = Callable[..., tuple[int, dict[str, Any]]]

MAKE = {
    "fifo": "mkfifo {p}",
    "socket": f"{sys.executable} -I -c "
    "'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' {p}",
    "char-device": "mknod {p} c 0 0",
}
WHERE = {
    ".gitignore": ("", ".gitignore"),
    ".gitattributes": ("", ".gitattributes"),
    "nested dir": ("mkdir -p sub/dir && echo kept > sub/dir/kept.txt", "sub/dir/.gitignore"),
    "tracked file": ("rm README.md", "README.md"),
}


def _agent_run(oms_json: OmsJson, repo: Path, script: str) -> tuple[int, dict[str, Any]]:
    sh = ["--", "/bin/sh", "-c", f"echo oms-start; {script}; echo oms-end"]
    # Bounded: without the fix, collect blocks on the FIFO and this raises TimeoutExpired.
    return oms_json(["agent", "run", "--repo", str(repo), "--json", *sh], timeout=180,
                    json_flag=False)  # fmt: skip


def _files(repo: Path, commit: str, env: dict[str, str]) -> set[str]:
    return set(git(repo, "ls-tree", "-r", "-z", "--name-only", commit, env=env).split("\0")) - {""}


def _end_of(repo: Path, run_id: str) -> AgentRunEnd:
    _, store = open_store(repo)
    [end] = [p for _, p in store.payloads(AgentRunEnd) if p.run_id == run_id]
    return end


@pytest.mark.parametrize("where", sorted(WHERE))
@pytest.mark.parametrize("kind", sorted(MAKE))
def test_a_special_file_is_recorded_left_out_and_never_opened(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str], kind: str, where: str
) -> None:
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    prep, path = WHERE[where]
    make = MAKE[kind].format(p=path)
    script = f"{prep or 'true'}; {make}; echo made=$?; echo new > made.txt"
    code, out = _agent_run(oms_json, git_repo, script)
    assert "oms-start" in out["stdout"] and "oms-end" in out["stdout"], out
    if kind == "char-device" and "made=0" not in out["stdout"]:
        pytest.skip("this kernel refuses the whiteout device node in a user namespace")
    assert "made=0" in out["stdout"], out
    assert code == 0 and out["exit_code"] == 0, out
    assert out["special_files"] == [{"path": path, "kind": kind}]
    files = _files(git_repo, out["candidate"], oms_env)
    assert "made.txt" in files and path not in files
    if where == "nested dir":
        assert "sub/dir/kept.txt" in files
    end = _end_of(git_repo, out["run_id"])
    assert end.reason == "collected" and end.refused is None
    assert [(s.path, s.kind) for s in end.special_files] == [(path, kind)]
    assert end.special_total == 1 and end.candidate == out["candidate"]
    [row] = log_rows(git_repo, "agent.run.end", 1)
    assert "1 special file left out" in row.summary


def test_ignore_rules_still_hold_beside_a_special_gitignore(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str]
) -> None:
    """A FIFO `.gitignore` at the top; a regular one below still ignores what it names."""
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    script = ("mkfifo .gitignore; mkdir sub; printf '*.log\\n' > sub/.gitignore; "
              "echo a > sub/a.log; echo b > sub/b.txt; echo c > c.log")  # fmt: skip
    code, out = _agent_run(oms_json, git_repo, script)
    assert code == 0 and "oms-end" in out["stdout"], out
    files = _files(git_repo, out["candidate"], oms_env)
    assert {"sub/.gitignore", "sub/b.txt", "c.log"} <= files
    assert "sub/a.log" not in files and ".gitignore" not in files


def test_a_fifo_as_a_nested_repositorys_head_is_never_opened(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str]
) -> None:
    """git opens `vendor/.git/HEAD` to tell a nested repository (a FIFO there hung it too);
    oms takes any directory holding a `.git` as one, looks no further, and leaves it out."""
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    script = ("mkdir -p vendor/.git/objects vendor/.git/refs && mkfifo vendor/.git/HEAD && "
              "echo lib > vendor/lib.txt && echo new > made.txt")  # fmt: skip
    code, out = _agent_run(oms_json, git_repo, script)
    assert code == 0 and "oms-end" in out["stdout"], out
    files = _files(git_repo, out["candidate"], oms_env)
    assert "made.txt" in files and not any(f.startswith("vendor") for f in files)
    assert _end_of(git_repo, out["run_id"]).reason == "collected"


def test_a_candidate_with_a_special_file_left_out_is_still_gated(
    oms_json: OmsJson, git_repo: Path
) -> None:
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    code, out = _agent_run(oms_json, git_repo, "mkfifo .gitignore; echo more >> README.md")
    assert code == 0 and out["candidate"], out
    code, verdict = oms_json(
        ["process-result", "--repo", str(git_repo), "--candidate", out["candidate_ref"]],
        timeout=300,
    )
    assert verdict["commit"] == out["candidate"], verdict
    assert verdict["decision"] in {"READY_FOR_HUMAN", "FAILED", "BLOCKED"}, verdict


# -- every way out writes agent.run.end, with its reason (in process) -------------------------


def _refused(monkeypatch: pytest.MonkeyPatch) -> str:
    return "mkdir -p .git/objects/info && echo /tmp > .git/objects/info/alternates"


def _timed_out(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(workspace_module, "COLLECT_DEADLINE_S", 0.0)
    return "mkfifo .gitignore; echo new > made.txt"


# reason -> (the agent's script, set-up included; the refusal's message, None: no refusal)
WAYS_OUT: dict[str, tuple[Callable[[pytest.MonkeyPatch], str], str | None]] = {
    "collected": (lambda mp: "mkfifo .gitignore; echo new > made.txt", None),
    "refused": (_refused, "alternates names other object stores"),
    "collect_timeout": (_timed_out, "collecting the workspace took longer than 0 s"),
}


@pytest.mark.parametrize("reason", sorted(WAYS_OUT))
def test_every_way_out_writes_the_end_entry_with_its_reason(
    git_repo: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, reason: str
) -> None:
    init(git_repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(git_repo.parent / "work"))
    setup, refusal = WAYS_OUT[reason]
    script = f"echo oms-start; {setup(monkeypatch)}; echo oms-end"
    req = AgentRunRequest(repo_dir=git_repo, cmd=("/bin/sh", "-c", script), capture=True)
    if refusal is None:
        out = agent_run_module.agent_run(req)
        assert out.stdout is not None and "oms-end" in out.stdout and out.candidate
        run_id = out.run_id
    else:
        with pytest.raises(Blocked, match=refusal) as caught:
            agent_run_module.agent_run(req)
        run_id = caught.value.data["run_id"]
        assert git(git_repo, "for-each-ref", "refs/oms/", env=oms_env) == ""  # nothing kept
    end = _end_of(git_repo, run_id)
    assert end.reason == reason
    assert end.exit_code == 0  # the command ran to its end marker
    assert (end.refused is None) == (refusal is None)
    assert (end.candidate is None) == (refusal is not None)


def test_a_git_call_of_collect_is_killed_at_the_deadline(tmp_path: Path) -> None:
    """A git that would wait for ever (cat-file on a stdin never closed) is killed."""
    git(tmp_path, "init", "-q")
    proc = subprocess.Popen(["git", "-C", str(tmp_path), "cat-file", "--batch"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    with pytest.raises(CollectTimeout, match="took longer than"):
        with killed_at(Deadline.after(1), "git cat-file", proc):
            proc.wait()
    assert proc.returncode is not None and proc.returncode < 0  # killed, and reaped
