"""The `claude-code` adapter with the real Claude Code CLI (from npm, `make agents`) against
the loopback fake of the Messages API: an api-key exec implementer role (`claude -p`). The
document is the prompt, on stdin; the scripted tool call edits a file, which comes back as
the candidate; the receipt's output is Claude Code's `result`. Skipped, saying why, when
the CLI is not installed. Only loopback is contacted, through oms' broker.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fake_models import FINAL_TEXT, fake_anthropic
from support.repos import git, make_repo

from gatekeeper.agent.workspace import new_run_id
from gatekeeper.gates.records import init
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderRequest
from gatekeeper.work.roles import require, resolve, trusted_policy

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CLAUDE = BIN / "claude"
pytestmark = [
    pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="needs /usr/bin/bwrap"),
    pytest.mark.skipif(
        not os.access(CLAUDE, os.X_OK),
        reason="claude is not installed under .cache/agents: run `make agents` (needs npm)",
    ),
]
POLICY = """version = 1

[roles.impl]
provider = "claude-code"
model = "claude-fake-model"
auth = "api-key"
billing = "usage"
allow_usage_billing = true
transport = "exec"
authority = "worktree-write"
unattended = true
"""
DOCUMENT = b"Implement the ticket (oms-task-document-91c2): add feature.txt.\n"
TOOL = "printf 'from claude\\n' > feature.txt"


def test_the_real_claude_code_implements_through_the_adapter(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-real-oms-claude-provider-0123456789")
    policy = trusted_policy(repo)
    role = require(resolve(policy, "impl"), unattended=True)
    base = git(repo, "rev-parse", "HEAD").strip()
    with fake_anthropic(TOOL) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", fake.url)
        got = adapter(role)(ProviderRequest(repo, base, role, new_run_id(), DOCUMENT,
                                            loaded=policy))  # fmt: skip
    assert got.exit_code == 0 and not got.timed_out, got
    assert got.engine == "claude-code" and got.output == FINAL_TEXT
    assert got.usage is not None and "output_tokens" in got.usage, got.usage
    assert got.candidate is not None
    assert git(repo, "show", f"{got.candidate}:feature.txt") == "from claude\n"
    # The document was the prompt (stdin), and the model the role's.
    assert fake.seen("oms-task-document-91c2")
    assert any(r.json().get("model") == "claude-fake-model" for r in fake.model_requests())
