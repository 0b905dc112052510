"""The `codex-cli` adapter with the real Codex CLI (from npm, `make agents`) against the
loopback fake of the Responses API: a read-only grader role whose final message is a JSON
grade. The document reaches Codex on stdin, the schema as the read-only file it names;
the receipt carries the final message and the token counts. Skipped, saying why, when the
CLI is not installed. Only loopback is contacted: Codex runs in its own network namespace
and reaches the fake through oms' broker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.fake_models import fake_openai
from support.repos import git, make_repo

from gatekeeper.agent.workspace import new_run_id
from gatekeeper.gates.records import init
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderRequest
from gatekeeper.work.roles import require, resolve, trusted_policy

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

[roles.grader]
provider = "codex-cli"
model = "gpt-5.5"
auth = "api-key"
billing = "usage"
allow_usage_billing = true
transport = "exec"
authority = "read-only"
unattended = true
"""
GRADE = {"grade": "pass", "reasons": ["the diff does what the ticket asks"]}
SCHEMA = {
    "type": "object",
    "properties": {
        "grade": {"type": "string", "enum": ["pass", "fail", "uncertain"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["grade", "reasons"],
    "additionalProperties": False,
}
DOCUMENT = b"Grade this change (oms-grading-document-7f3a): the diff, the checks, the verdict.\n"


def test_the_real_codex_grades_through_the_adapter_and_the_receipt_has_the_grade(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-real-oms-codex-provider-0123456789")
    policy = trusted_policy(repo)
    role = require(resolve(policy, "grader"), unattended=True)
    base = git(repo, "rev-parse", "HEAD").strip()
    run_id = new_run_id()
    refs_before = git(repo, "for-each-ref")
    with fake_openai(None, final_text=json.dumps(GRADE)) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_OPENAI", fake.url)
        got = adapter(role)(ProviderRequest(repo, base, role, run_id, DOCUMENT,
                                            output_schema=SCHEMA, loaded=policy))  # fmt: skip
    assert got.exit_code == 0 and not got.timed_out, got
    assert got.engine == "codex-cli" and got.run_id == run_id and got.base == base
    assert json.loads(got.output) == GRADE
    assert got.usage is not None and got.usage.get("input_tokens", 0) >= 1, got.usage
    # A grader is read-only: no candidate, nothing fetched into the repository.
    assert got.candidate is None and git(repo, "for-each-ref") == refs_before
    reqs = fake.model_requests()
    assert reqs, "codex never reached the fake"
    # The document came in on stdin (it is in the prompt) and the schema from its file.
    assert fake.seen("oms-grading-document-7f3a")
    assert any(b'"uncertain"' in r.body for r in reqs)  # only the schema says "uncertain"
