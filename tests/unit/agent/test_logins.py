"""The shape a credential file must have to be kept (gatekeeper/agent/logins.py); the
copying in and out is tested end to end in tests/e2e/test_agent_logins.py."""

from __future__ import annotations

import json

import pytest

from gatekeeper.agent.logins import shaped


def test_only_the_clis_own_keys_are_kept() -> None:
    codex = {"OPENAI_API_KEY": None, "tokens": {"refresh_token": "r"}, "last_refresh": "t",
             "mcp_servers": {"evil": {"command": "sh"}}}  # fmt: skip
    kept = shaped("codex", json.dumps(codex).encode())
    assert kept is not None
    assert json.loads(kept) == {"OPENAI_API_KEY": None, "tokens": {"refresh_token": "r"},
                                "last_refresh": "t"}  # fmt: skip
    claude = {"claudeAiOauth": {"accessToken": "a"}, "hooks": {"Stop": "x"}}
    assert json.loads(shaped("claude-code", json.dumps(claude).encode()) or b"") == {
        "claudeAiOauth": {"accessToken": "a"}
    }


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("claude-code", b"not json"),
        ("claude-code", b"[1, 2]"),
        ("claude-code", b'{"claudeAiOauth": "a string"}'),
        ("claude-code", b'{"tokens": {}}'),  # Codex's shape is not Claude Code's
        ("codex", b'{"OPENAI_API_KEY": "k"}'),  # an API key is not a subscription login
        ("codex", b"\xff\xfe"),
    ],
)
def test_anything_else_is_not_a_credential_file(kind: str, data: bytes) -> None:
    assert shaped(kind, data) is None  # type: ignore[arg-type]
