"""The real Codex CLI (from npm, `make agents`) as one consult's provider, against the
loopback fake of the Responses API: a read-only `codex-cli` critic whose transfer an
autopilot rule of the policy approves. The consult completes, its report artifact holds
the fake model's answer, the brief reached the model (on stdin, never argv), and oms'
egress broker recorded the request it forwarded. Skipped, saying why, when the CLI is not
installed. Only loopback is contacted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fake_models import fake_openai
from support.repos import make_repo
from support.runs import TEST_MOD

from evidence import EvidenceStore, state_root
from gatekeeper.agent.payloads import EgressRequest
from gatekeeper.gates.records import init
from gatekeeper.repo.git import open_repo
from gatekeeper.work.runs import api

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CODEX = BIN / "codex"
pytestmark = [
    pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="needs /usr/bin/bwrap"),
    pytest.mark.skipif(
        not os.access(CODEX, os.X_OK),
        reason="codex is not installed under .cache/agents: run `make agents` (needs npm)",
    ),
]
POLICY = """version = 1

[roles.critic]
provider = "codex-cli"
model = "gpt-5.5"
auth = "api-key"
billing = "usage"
allow_usage_billing = true
transport = "exec"
authority = "read-only"
unattended = true

[[transfer.autopilot]]
name = "auto-codex-critic"
destinations = ["codex-cli:gpt-5.5"]
max_bytes = 10000000
context = ["repo"]
require_clean_pushed = false
"""
ANSWER = "oms-fake-critic-5e1d: the plan misses the rollback path"
GOAL = "Critique the retry design (oms-consult-brief-a94c)"


def test_a_consult_with_the_real_codex_completes_with_the_model_s_answer(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY, "test_mod.py": TEST_MOD},
                     env=oms_env)  # fmt: skip
    init(repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-real-oms-codex-consult-0123456789")
    with fake_openai(None, final_text=ANSWER) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_OPENAI", fake.url)
        out, code = api.consult(repo, GOAL, "critic")
    assert code == 0, out
    assert out["status"] == "completed", out
    [resp] = out["responses"]
    assert resp["engine"] == "codex-cli" and resp["ok"] is True, resp
    [report] = [a for a in out["artifacts"] if a["kind"] == "report"]
    got, _ = api.read_artifact(repo, out["run_id"], report["ref"])
    assert ANSWER in got["text"]
    # The brief reached the model, and the key oms' broker injected, not a placeholder.
    assert fake.model_requests(), "codex never reached the fake"
    assert fake.seen("oms-consult-brief-a94c")
    assert fake.seen("sk-test-real-oms-codex-consult-0123456789")
    r = open_repo(repo)
    entries = list(EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir).entries())
    kinds = [e.kind for e in entries]
    assert kinds.count("transfer.approve") == 1 and kinds.count("transfer.release") == 1
    egress = [EgressRequest.of(e) for e in entries if e.kind == EgressRequest.KIND]
    forwarded = [x for x in egress if x.action == "forwarded" and x.provider == "openai"]
    assert forwarded and all(x.path.startswith("/v1/responses") for x in forwarded), egress
    assert resp["agent_run"] in {x.run_id for x in forwarded}
