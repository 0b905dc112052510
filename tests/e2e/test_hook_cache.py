"""A benign tool call's hook starts no process (issue 33): the hooks' policy cache answers
without git, the scan-result cache without a scanner; any doubt about the policy cache is a
miss that reads the policy as the gates do.

The real CLI's hook runs in a subprocess (a real repository after a real `oms init`, the real
Gitleaks and detect-secrets) under a Python audit hook that logs every process it starts
(`subprocess.Popen`, `os.posix_spawn`, `os.exec*`, `os.system`): Gitleaks is run through
the descriptor oms verified, not found on PATH, so a wrapper on PATH would not see it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.repos import commit_policy, make_repo

from gatekeeper.integrations.hooks import policy_cache

POLICY = 'version = 1\n\n[protected]\npaths = ["secrets/"]\n'
MOD = "def add(a, b):\n    return a + b\n"

# The hook in-process as the console script runs it, every process it starts logged.
RUNNER = (
    "import json, sys\n"
    "log = open(sys.argv[2], 'a')\n"
    "def audit(event, args):\n"
    "    if event in ('subprocess.Popen', 'os.posix_spawn', 'os.exec', 'os.system'):\n"
    "        log.write(json.dumps([event, str(args[0]), [str(a) for a in args[1] or ()]"
    " if event != 'os.system' else []]) + '\\n'); log.flush()\n"
    "sys.addaudithook(audit)\n"
    "from gatekeeper.cli.main import main\n"
    "main(json.loads(sys.argv[1]))\n"
)


@pytest.fixture
def repo(tmp_path: Path, oms_env: dict[str, str], run_oms: Any) -> Path:
    top = make_repo(tmp_path / "repo", {"oms.toml": POLICY, "mod.py": MOD}, env=oms_env)
    assert run_oms(["init", "--repo", str(top), "--json"]).returncode == 0
    return top


def _hook(repo: Path, env: dict[str, str], log: Path, tool: str,
          tool_input: dict[str, str]) -> tuple[str, list[list[Any]]]:  # fmt: skip
    """(stdout, the processes it started) of one real PreToolUse hook call."""
    log.write_text("")
    body = {"hook_event_name": "PreToolUse", "session_id": "s", "cwd": str(repo),
            "tool_name": tool, "tool_input": tool_input}  # fmt: skip
    argv = json.dumps(["hook", "claude-code", "PreToolUse"])
    proc = subprocess.run([sys.executable, "-P", "-c", RUNNER, argv, str(log)], cwd=repo,
                          env=env, input=json.dumps(body), capture_output=True, text=True,
                          check=False, timeout=180)  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout, [json.loads(line) for line in log.read_text().splitlines()]


def _names(started: list[list[Any]]) -> set[str]:
    return {"git" if argv[:1] == ["git"] else "gitleaks" if argv[1:2] == ["dir"] else argv[0]
            for _, _, argv in started}  # fmt: skip


def _entry(oms_home: Path) -> Path:
    (found,) = (oms_home / "cache" / "hook-policy").glob("*.json")
    return found


def test_benign_calls_start_no_git_and_no_scanner(
    repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "started.jsonl"
    write = {"file_path": str(repo / "mod.py"), "content": MOD + "# sum\n"}
    out, first = _hook(repo, oms_env, log, "Write", write)
    assert out == "" and {"git", "gitleaks"} <= _names(first)  # a miss: both ran
    for tool, tool_input in (("Write", write), ("Bash", {"command": "ls -la"})):
        out, started = _hook(repo, oms_env, log, tool, tool_input)
        assert (out, started) == ("", []), (tool, started)
    read = {"file_path": str(repo / "mod.py")}
    _hook(repo, oms_env, log, "Read", read)  # the file's scan is new: it is cached now
    assert _hook(repo, oms_env, log, "Read", read) == ("", [])


def test_a_cached_policy_still_denies_its_protected_paths(
    repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "started.jsonl"
    secret = {"file_path": str(repo / "secrets" / "a.txt"), "content": "x\n"}
    for _ in range(2):  # the miss, then the cache
        out, _started = _hook(repo, oms_env, log, "Write", secret)
        assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert _started == []


def _signed(oms_home: Path, entry: dict[str, Any], key: bytes | None = None) -> str:
    """The entry with the MAC the cache would give it (under `key`, else the state root's)."""
    key = key if key is not None else (oms_home / "cache" / "scan.key").read_bytes()
    body = json.dumps(entry, sort_keys=True).encode()
    mac = hmac.new(key, policy_cache.DOMAIN + body, hashlib.sha256).hexdigest()
    return json.dumps({"entry": entry, "mac": mac})


@pytest.mark.parametrize("damage", ["forged", "corrupt", "foreign", "stale"])
def test_any_doubt_about_the_cache_is_a_miss(
    damage: str, repo: Path, oms_env: dict[str, str], oms_home: Path, tmp_path: Path
) -> None:
    """An entry whose protected list was emptied without the key, bytes that are not an
    entry, one signed under another state root's key, one made for another tip: the policy
    is read again (git runs) and `secrets/` is still denied."""
    log = tmp_path / "started.jsonl"
    secret = {"file_path": str(repo / "secrets" / "a.txt"), "content": "x\n"}
    _hook(repo, oms_env, log, "Bash", {"command": "true"})
    _hook(repo, oms_env, log, "Write", secret)
    entry = _entry(oms_home)
    doc = json.loads(entry.read_text())
    if damage == "forged":
        doc["entry"]["protected"] = []
        entry.write_text(json.dumps(doc))
    elif damage == "corrupt":
        entry.write_bytes(entry.read_bytes()[:40])
    elif damage == "foreign":
        doc["entry"]["protected"] = []
        entry.write_text(_signed(oms_home, doc["entry"], key=b"k" * 32))
    else:  # properly signed, but for a tip the branch is no longer at
        doc["entry"]["protected"] = []
        doc["entry"]["facts"]["tip"] = "0" * 40
        entry.write_text(_signed(oms_home, doc["entry"]))
    out, started = _hook(repo, oms_env, log, "Write", secret)
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "git" in _names(started)


def test_a_newly_trusted_policy_is_a_miss(
    repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    """A policy committed and trusted on main moves the tip and appends to the log: the
    cached entry no longer answers, and the new protected path is denied at once."""
    log = tmp_path / "started.jsonl"
    docs = {"file_path": str(repo / "docs" / "a.md"), "content": "x\n"}
    assert _hook(repo, oms_env, log, "Write", docs)[0] == ""
    commit_policy(repo, env=oms_env, text='version = 1\n\n[protected]\npaths = ["docs/"]\n')
    out, started = _hook(repo, oms_env, log, "Write", docs)
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "git" in _names(started)
