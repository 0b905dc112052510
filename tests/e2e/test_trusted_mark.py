"""The trusted mark: the policy and plan come from the default branch's latest commit that a
human trusted (`oms init`, `oms policy trust` at a terminal) or the gate judged READY, never
from commits no one judged, even on the tip; the commits after the mark are judged.

Real repositories, the real CLI, the real sandbox and scanners; agent commits are made on
`main` itself, as a solo developer lets an agent do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.oms import parse_single_json, run_oms
from support.pty import oms_at_pty, trust_tip
from support.repos import make_repo

from evidence import EvidenceStore

PY = "/usr/bin/python3"  # Debian's python: present inside the check sandbox
POLICY = f"""version = 1

[[checks]]
name = "unit"
cmd = ["{PY}", "-m", "unittest", "-q"]
timeout_s = 60
"""
NO_CHECKS = 'version = 1\n\n[[checks]]\nname = "unit"\ncmd = ["/bin/true"]\n'
MOD = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a - b\n"
TEST = ("import unittest\n\nimport mod\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n")  # fmt: skip


class Repo:
    def __init__(self, top: Path, env: dict[str, str]) -> None:
        self.top, self.env = top, env

    def oms(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--repo", str(self.top), "--json"], env=self.env, cwd=self.top,
                       timeout=180)  # fmt: skip
        return proc.returncode, parse_single_json(proc)

    def text(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_oms([*args, "--repo", str(self.top)], env=self.env, cwd=self.top, timeout=180)

    def git(self, *args: str) -> str:
        proc = subprocess.run(["git", "-C", str(self.top), *args], capture_output=True,
                              text=True, env=self.env, check=True)  # fmt: skip
        return proc.stdout.strip()

    def commit_main(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            (self.top / name).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def gate_head(self) -> tuple[int, dict[str, Any]]:
        return self.oms("process-result", "--candidate", "HEAD", "--no-progress")

    def mark(self) -> dict[str, Any]:
        code, shown = self.oms("policy", "show")
        assert code == 0, shown
        return dict(shown["mark"])


@pytest.fixture
def repo(tmp_path: Path, oms_env: dict[str, str]) -> Repo:
    files = {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST}
    r = Repo(make_repo(tmp_path / "repo", files, env=oms_env), oms_env)
    code, out = r.oms("init")
    assert code == 0, out
    return r


def test_init_records_the_default_branchs_tip_as_the_trusted_mark(repo: Repo) -> None:
    tip = repo.git("rev-parse", "main")
    mark = repo.mark()
    assert (mark["commit"], mark["tip"], mark["by"], mark["ref"]) == (
        tip, tip, "init", "refs/heads/main")  # fmt: skip
    entry = EvidenceStore.open(Path(repo.env["OMS_HOME"]), _repo_id(repo)).entry(mark["seq"])
    assert entry.kind == "policy.trust" and entry.data["commit"] == tip
    shown = repo.text("policy", "show")
    assert f"# trusted mark: refs/heads/main at {tip[:12]} (by init" in shown.stdout


def _repo_id(repo: Repo) -> str:
    code, init = repo.oms("init")
    assert code == 0, init
    return str(init["repo_id"])


def test_a_policy_committed_on_main_after_the_mark_is_not_trusted(repo: Repo) -> None:
    mark = repo.mark()["commit"]
    weak = repo.commit_main({"oms.toml": NO_CHECKS, "mod.py": BROKEN}, "agent: relax the plan")
    code, shown = repo.oms("policy", "show")
    assert code == 0 and shown["commit"] == mark and shown["policy"]["checks"][0]["cmd"][0] == PY
    code, out = repo.gate_head()
    # Judged by the mark's policy: the plan change is a protected path, and the plan's
    # own check ran the mark's command (not /bin/true).
    assert code == 3 and out["decision"] == "BLOCKED", out
    assert any(r.startswith("protected path changed: oms.toml") for r in out["reasons"])
    assert out["judged"]["range"] == f"{mark}..{weak}" and out["judged"]["commits"] == 1
    assert out["judged"]["mark"]["commit"] == mark
    assert repo.mark()["commit"] == mark  # BLOCKED never moves it


def test_commits_on_main_after_the_mark_are_judged_and_only_ready_moves_it(
    repo: Repo,
) -> None:
    first = repo.mark()["commit"]
    good = repo.commit_main({"mod.py": MOD + "\n# tidy\n"}, "agent: tidy")
    code, out = repo.gate_head()
    assert code == 0 and out["decision"] == "READY_FOR_HUMAN", out
    assert out["base"] == first and out["judged"]["range"] == f"{first}..{good}"
    human = repo.text("process-result", "--candidate", "HEAD", "--no-progress")
    assert f"nothing to verify: {good[:12]} is at the trusted mark" in human.stdout
    assert repo.mark()["commit"] == good and repo.mark()["by"] == "ready"
    broken = repo.commit_main({"mod.py": BROKEN}, "agent: break it")
    code, out = repo.gate_head()
    assert code == 1 and out["decision"] == "FAILED" and out["base"] == good, out
    assert repo.mark()["commit"] == good
    fixed = repo.commit_main({"mod.py": MOD}, "agent: fix it")
    code, out = repo.gate_head()
    assert code == 0 and out["base"] == good, out  # the FAILED commit stays in the range
    assert out["judged"]["commits"] == 2 and out["judged"]["range"] == f"{good}..{fixed}"
    assert broken != fixed and repo.mark()["commit"] == fixed
    lines = repo.text("process-result", "--candidate", "HEAD~1", "--no-progress").stdout
    assert "already in the default branch's trusted history" in lines


def test_policy_trust_at_a_terminal_moves_the_mark_and_refuses_without_one(repo: Repo) -> None:
    old = repo.mark()["commit"]
    tip = repo.commit_main({"oms.toml": POLICY.replace("60", "90")}, "human: longer time-out")
    proc = subprocess.run([sys.executable, "-m", "gatekeeper", "policy", "trust", "--repo",
                           str(repo.top), "--json"], input="yes\n", capture_output=True,
                          text=True, env=repo.env, cwd=repo.top, start_new_session=True,
                          timeout=120, check=False)  # fmt: skip
    out = parse_single_json(proc)
    assert proc.returncode == 3 and out["error"]["kind"] == "blocked", out
    assert "terminal" in out["error"]["message"] and repo.mark()["commit"] == old
    got = oms_at_pty(["policy", "trust", "--repo", str(repo.top), "--json"], b"yes\n",
                     env=repo.env, cwd=repo.top)  # fmt: skip
    assert got.code == 0, (got.out, got.err)
    assert "-timeout_s = 60" in got.screen and "+timeout_s = 90" in got.screen
    done = json.loads(got.out)
    assert (done["commit"], done["previous"], done["changed"]) == (tip, old, ["oms.toml"])
    mark = repo.mark()
    assert (mark["commit"], mark["by"]) == (tip, "terminal")
    code, shown = repo.oms("policy", "show")
    assert code == 0 and shown["policy"]["checks"][0]["timeout_s"] == 90
    trust_tip(repo.top, env=repo.env)  # the tip is the mark: nothing is asked
    repo.commit_main({"oms.toml": POLICY + "bogus = 1\n"}, "a policy that does not load")
    code, out = repo.oms("policy", "trust")
    assert code == 2 and "bogus: unknown key" in out["error"]["message"], out
    assert repo.mark()["commit"] == tip


def test_a_log_without_marks_trusts_the_tip_at_its_first_run_and_says_so(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    top = make_repo(tmp_path / "old", {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST},
                    env=oms_env)  # fmt: skip
    # A state root set up before marks existed: a log with its genesis entry only.
    setup = (
        "import sys; from pathlib import Path; from evidence import EvidenceStore, "
        "state_root; from gatekeeper.repo.git import open_repo; r = open_repo(Path("
        "sys.argv[1])); EvidenceStore.init(state_root(), r.repo_id, r.common_dir)"
    )
    subprocess.run([sys.executable, "-c", setup, str(top)], env=oms_env, check=True)
    repo = Repo(top, oms_env)
    tip = repo.git("rev-parse", "main")
    agent = repo.commit_main({"mod.py": MOD + "\n"}, "agent: newline")
    repo.git("reset", "-q", "--hard", "HEAD~1")  # the agent's commit waits on a branch
    repo.git("branch", "agent", agent)
    first = repo.text("process-result", "--candidate", "agent", "--no-progress")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("the default branch's tip at this first run is trusted") == 1
    assert (
        f"judged {tip[:12]}..{agent[:12]}, 1 commit, by the policy at the trusted mark "
        f"{tip[:12]} on refs/heads/main (first-run, entry"
    ) in first.stdout
    mark = repo.mark()
    assert (mark["commit"], mark["by"]) == (tip, "first-run")
    assert "set up before oms kept one" in mark["note"]
    again = repo.text("process-result", "--candidate", "agent", "--no-progress")
    assert "first run" not in again.stdout


def test_a_forged_pointer_cache_is_ignored(repo: Repo) -> None:
    first = repo.mark()
    good = repo.commit_main({"mod.py": MOD + "\n"}, "agent: newline")
    assert repo.gate_head()[0] == 0
    assert repo.mark()["commit"] == good
    pointer = Path(repo.env["OMS_HOME"]) / "repos" / _repo_id(repo) / "trusted-mark.json"
    doc = json.loads(pointer.read_text())
    # Back to the older mark, and its signature left as it was: not the signed pointer.
    pointer.write_text(json.dumps({**doc, "seq": first["seq"]}))
    assert repo.mark()["commit"] == good
    pointer.write_text(json.dumps({**doc, "seq": first["seq"], "sig": "00" * 64}))
    assert repo.mark()["commit"] == good
