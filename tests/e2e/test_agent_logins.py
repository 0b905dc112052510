"""Subscription logins under `oms agent run --egress tunnel` (gatekeeper/agent/logins.py).

The real CLIs are heavy, and a login needs a real provider: the agent here is a script in
the place of Claude Code's executable, in an npm package layout (tests/support/npm.py), so
that oms runs it as the `claude-code` kind, with the real bwrap, tunnel and fresh config
dir. It writes into its config dir what a hostile agent would want to keep (settings,
hooks, instructions, an agent) beside a refreshed credential file; the next run must see
the refreshed credential and none of the rest. Nothing is ever contacted.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.npm import fake_npm

OmsJson = Callable[..., tuple[int, dict[str, Any]]]

# The agent: the last argument says what it does; it prints what it finds first.
AGENT = r"""#!/bin/sh
for a; do mode=$a; done
c="$CLAUDE_CONFIG_DIR"
echo "credential=$(cat "$c/.credentials.json" 2>/dev/null || echo none)"
echo "listing=$(ls -A "$c" | tr '\n' ' ')"
echo "planted=$(grep -rl planted "$c" 2>/dev/null | wc -l)"
cred() { printf '{"claudeAiOauth": {"accessToken": "%s"}, "extra": "planted"}' "$1"; }
case "$mode" in
  login)
    cred tok-1 > "$c/.credentials.json"
    echo '{"hooks": {"Stop": "planted"}}' > "$c/settings.json"
    echo '{"hooks": "planted"}' > "$c/hooks.json"
    echo planted > "$c/CLAUDE.md"
    mkdir -p "$c/agents" && echo planted > "$c/agents/evil.md" ;;
  refresh) cred tok-2 > "$c/.credentials.json" ;;
  symlink) cred tok-3 > "$c/elsewhere.json"; rm -f "$c/.credentials.json"
           ln -s elsewhere.json "$c/.credentials.json" ;;
  malformed) echo '{"claudeAiOauth": "tok-3"}' > "$c/.credentials.json" ;;
  notjson) echo 'tok-3' > "$c/.credentials.json" ;;
  fifo) rm -f "$c/.credentials.json"; mkfifo "$c/.credentials.json" ;;
esac
"""


@pytest.fixture
def claude(tmp_path: Path) -> Path:
    """The stand-in for Claude Code: its package layout, this script as its executable."""
    fake_npm(tmp_path / "npm")
    exe = tmp_path / "npm/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    exe.write_text(AGENT)
    return exe


def _stored(home: Path) -> Path:
    return home / ".local/share/oms/logins/claude-code/.credentials.json"


def _run(oms_json: OmsJson, repo: Path, claude: Path, mode: str) -> tuple[dict[str, Any], str]:
    code, out = oms_json(["agent", "run", "--repo", str(repo), "--agent", "claude-code",
                          "--egress", "tunnel", "--json", "--", str(claude), mode],
                         timeout=180, json_flag=False)  # fmt: skip
    assert code == 0 and out["exit_code"] == 0, out
    return out, out["stdout"]


def test_only_a_refreshed_credential_survives_a_run(
    oms_json: OmsJson, git_repo: Path, claude: Path, fake_home: Path, oms_home: Path
) -> None:
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    out, seen = _run(oms_json, git_repo, claude, "login")
    assert "credential=none" in seen and out["login"] == "saved"
    stored = _stored(fake_home)
    assert oms_home not in stored.parents
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700
    # Only the CLI's own keys are written back.
    assert json.loads(stored.read_text()) == {"claudeAiOauth": {"accessToken": "tok-1"}}

    out, seen = _run(oms_json, git_repo, claude, "refresh")
    assert '"accessToken": "tok-1"' in seen, seen
    # Nothing else the last run wrote to its config is there: no settings, hooks,
    # instructions or agents of its own (oms' fresh settings.json is).
    assert "planted=0" in seen, seen
    for name in ("hooks.json", "CLAUDE.md", "agents"):
        assert name not in seen.split("listing=", 1)[1].splitlines()[0].split(), seen
    assert out["login"] == "saved"
    assert json.loads(stored.read_text())["claudeAiOauth"]["accessToken"] == "tok-2"

    out, seen = _run(oms_json, git_repo, claude, "show")
    assert '"accessToken": "tok-2"' in seen and out["login"] == "unchanged"


@pytest.mark.parametrize("mode", ["symlink", "malformed", "notjson", "fifo"])
def test_a_credential_file_that_is_not_one_is_not_copied_back(
    oms_json: OmsJson, git_repo: Path, claude: Path, fake_home: Path, mode: str
) -> None:
    assert oms_json(["init", "--repo", str(git_repo)])[0] == 0
    stored = _stored(fake_home)
    stored.parent.mkdir(parents=True, mode=0o700)
    before = '{"claudeAiOauth": {"accessToken": "tok-1"}}\n'
    stored.write_text(before)
    out, seen = _run(oms_json, git_repo, claude, mode)
    assert "tok-1" in seen  # the run had its copy
    assert out["login"].startswith("refused"), out["login"]
    assert stored.read_text() == before
