"""`oms agent run` end to end: the real CLI, real bwrap, real git, the real evidence log.

Every command run inside prints a start and an end marker, asserted, so that a refusal to
run is never mistaken for containment. Only loopback is ever contacted (`--egress none`
here; the brokered egress has its own tests).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.types import LATEST_PROTOCOL_VERSION
from support.oms import OMS, parse_single_json
from support.oms import run_oms as run_oms_in
from support.repos import git
from support.tls import make_test_ca, tls_http_server

from gatekeeper.agent import run as agent_run_module
from gatekeeper.agent.payloads import AgentRunEnd, TunnelConnection
from gatekeeper.agent.run import AgentRunRequest
from gatekeeper.errors import Unavailable
from gatekeeper.gates.records import init, open_store

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]


def _sh(script: str) -> list[str]:
    return ["--", "/bin/sh", "-c", f"echo oms-start; {script}; echo oms-end"]


def _init(oms_json: OmsJson, repo: Path) -> None:
    code, _ = oms_json(["init", "--repo", str(repo)])
    assert code == 0


def _run(oms_json: OmsJson, repo: Path, script: str, *extra: str) -> tuple[int, dict[str, Any]]:
    # `--json` before `--`: after it, it would be CMD's own argument.
    return oms_json(["agent", "run", "--repo", str(repo), "--json", *extra, *_sh(script)],
                    timeout=180, json_flag=False)  # fmt: skip


def _ref(repo: Path, name: str) -> str | None:
    path = repo / ".git" / name
    return path.read_text().strip() if path.is_file() else None


def test_an_edit_comes_back_as_a_run_ref_with_the_recorded_base(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str], oms_home: Path
) -> None:
    _init(oms_json, git_repo)
    head = git(git_repo, "rev-parse", "HEAD", env=oms_env).strip()
    refs_before = git(git_repo, "for-each-ref", env=oms_env)
    code, out = _run(oms_json, git_repo, "echo new > made.txt; echo more >> README.md")
    assert code == 0, out
    assert "oms-start" in out["stdout"] and "oms-end" in out["stdout"]
    assert out["exit_code"] == 0 and out["base"] == head
    run_id = out["run_id"]
    assert out["candidate_ref"] == f"refs/oms/runs/{run_id}"
    assert _ref(git_repo, out["candidate_ref"]) == out["candidate"]
    files = git(git_repo, "ls-tree", "-r", "--name-only", out["candidate"], env=oms_env)
    assert "made.txt" in files.split()
    assert git(git_repo, "rev-parse", f"{out['candidate']}^", env=oms_env).strip() == head
    # Nothing of the user's moved: only the run ref is new.
    after = git(git_repo, "for-each-ref", env=oms_env)
    assert set(after.splitlines()) - set(refs_before.splitlines()) == {
        f"{out['candidate']} commit\t{out['candidate_ref']}"
    }
    assert not (git_repo / "made.txt").exists()
    workspace = Path(out["workspace"])
    assert workspace.is_dir() and oms_home not in workspace.parents
    assert set(out["egress"]) == {"requests", "forwarded", "redacted", "blocked", "no_key",
                                  "model_requests", "tokens", "stopped"}  # fmt: skip
    assert out["egress_mode"] == "none"


def test_the_start_and_end_entries_name_the_run(oms_json: OmsJson, git_repo: Path) -> None:
    _init(oms_json, git_repo)
    code, out = _run(oms_json, git_repo, "true")
    assert code == 0, out
    code, shown = oms_json(["evidence", "show", str(out["evidence_seq"]), "--repo", str(git_repo)])
    assert code == 0
    text = json.dumps(shown)
    assert out["run_id"] in text and "agent.run.end" in text
    code, start = oms_json(
        ["evidence", "show", str(out["evidence_seq"] - 1), "--repo", str(git_repo)]
    )
    assert "agent.run.start" in json.dumps(start)
    assert out["run_id"] in json.dumps(start)


def test_nothing_changed_means_no_candidate(oms_json: OmsJson, git_repo: Path) -> None:
    _init(oms_json, git_repo)
    code, out = _run(oms_json, git_repo, "ls > /dev/null")
    assert code == 0, out
    assert out["candidate"] is None and out["candidate_ref"] is None
    assert not (git_repo / ".git" / "refs" / "oms").exists()


def test_the_exit_code_is_the_commands_own(oms_json: OmsJson, git_repo: Path) -> None:
    _init(oms_json, git_repo)
    code, out = oms_json(
        ["agent", "run", "--repo", str(git_repo), "--json", "--", "/bin/sh", "-c",
         "echo oms-start; exit 7"], timeout=180, json_flag=False,
    )  # fmt: skip
    assert code == 1 and out["exit_code"] == 7
    assert "oms-start" in out["stdout"]


def test_a_commit_the_agent_made_itself_comes_back(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    script = "echo x > a.txt && git add a.txt && git commit -qm 'agent commit' && echo y > b.txt"
    code, out = _run(oms_json, git_repo, script)
    assert code == 0, out
    log = git(git_repo, "log", "--format=%s", out["candidate"], env=oms_env).splitlines()
    assert log[1] == "agent commit" and log[0].startswith("oms agent run")
    files = git(git_repo, "ls-tree", "-r", "--name-only", out["candidate"], env=oms_env).split()
    assert {"a.txt", "b.txt"} <= set(files)


def test_oms_state_the_key_and_the_repository_are_out_of_reach(
    oms_json: OmsJson, git_repo: Path, oms_home: Path, fake_home: Path
) -> None:
    _init(oms_json, git_repo)
    (fake_home / ".ssh").mkdir()
    (fake_home / ".ssh" / "id_ed25519").write_text("private\n")
    paths = [oms_home, fake_home / ".ssh", git_repo, git_repo / ".git"]
    checks = "; ".join(f"test -e '{p}' && echo 'visible {p}'" for p in paths)
    code, out = _run(oms_json, git_repo, f"{checks}; oms evidence note hi; echo note=$?")
    assert code == 0, out
    assert "visible" not in out["stdout"]
    assert "note=4" in out["stdout"], out
    assert "oms-end" in out["stdout"]


def test_oms_process_result_judges_a_run_ref_from_its_recorded_base(
    oms_json: OmsJson, git_repo: Path, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    head = git(git_repo, "rev-parse", "HEAD", env=oms_env).strip()
    code, out = _run(oms_json, git_repo, "echo change >> README.md")
    assert code == 0, out
    # The user's main moves on after the run: the recorded base still decides the diff.
    (git_repo / "later.txt").write_text("later\n")
    git(git_repo, "add", "later.txt", env=oms_env)
    git(git_repo, "commit", "-qm", "later", env=oms_env)
    code, verdict = oms_json(
        ["process-result", "--repo", str(git_repo), "--candidate", out["candidate_ref"]],
        timeout=300,
    )
    assert verdict["commit"] == out["candidate"], verdict
    code, start = oms_json(
        ["evidence", "show", str(verdict["evidence_seq"] - 1), "--repo", str(git_repo)]
    )
    text = json.dumps(start)
    assert "result.start" in text and head in text


def test_no_command_is_a_usage_error(oms_json: OmsJson, git_repo: Path) -> None:
    code, out = oms_json(["agent", "run", "--repo", str(git_repo)])
    assert code == 2 and out["error"]["kind"] == "usage"


def test_output_is_bounded_under_json(oms_json: OmsJson, git_repo: Path) -> None:
    _init(oms_json, git_repo)
    code, out = _run(oms_json, git_repo, "head -c 3000000 /dev/zero | tr '\\0' x")
    assert code == 0
    assert len(out["stdout"]) < 100_000 and "bytes not shown" in out["stdout"]


def _visible_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real probe that fails: it must find absent a path that is there inside."""
    real = agent_run_module.hidden_paths
    monkeypatch.setattr(agent_run_module, "hidden_paths",
                        lambda *a: [*real(*a), "/etc/passwd"])  # fmt: skip


def test_a_failed_probe_is_exit_4_and_the_command_never_starts(
    git_repo: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In process, the real probe in the run's own sandbox fails (the probe's checks one by
    one are tested in test_agent_containment): the run stops before CMD and before any
    start entry."""
    init(git_repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    _visible_hidden(monkeypatch)
    req = AgentRunRequest(repo_dir=git_repo, cmd=("/bin/sh", "-c", "echo ran > ran.txt"),
                          capture=True)  # fmt: skip
    with pytest.raises(Unavailable, match="probe failed: host path /etc/passwd is visible"):
        agent_run_module.agent_run(req)
    # A run refused before its start leaves no workspace and no canary behind.
    assert not [p for p in (tmp_path / "work").iterdir() if p.is_dir()]
    assert not list((oms_home / "canaries").glob("*"))
    _, store = open_store(git_repo)
    assert store.entries(["agent.run.start", "agent.run.end"]) == []


def test_the_command_behind_a_failed_probe_leaves_no_start_marker(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The workspace kept this time (its clean-up skipped): CMD's start marker is absent when
    the probe fails, and there when the same run's probe holds."""
    init(git_repo)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setattr(agent_run_module, "_unless_started", lambda run: None)
    req = AgentRunRequest(repo_dir=git_repo, cmd=("/bin/sh", "-c", "echo ran > ran.txt"),
                          capture=True)  # fmt: skip
    with monkeypatch.context() as m:
        _visible_hidden(m)
        with pytest.raises(Unavailable, match="probe failed"):
            agent_run_module.agent_run(req)
    kept = [p for p in (tmp_path / "work").iterdir() if p.is_dir()]
    assert len(kept) == 1 and not (kept[0] / "ran.txt").exists()
    out = agent_run_module.agent_run(req)
    assert out.exit_code == 0 and (Path(out.workspace) / "ran.txt").read_text() == "ran\n"


def test_egress_tunnel_carries_tls_to_a_provider_host_and_records_it(
    run_oms: RunOms, git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    """`--egress tunnel` through the real command: curl inside, with HTTPS_PROXY as oms sets
    it, does real TLS (test CA) to "api.anthropic.com", which the tunnel connects to a
    loopback stand-in (a real provider is never contacted); another host is refused."""
    ca = make_test_ca(git_repo / "ca")
    git(git_repo, "add", "ca/ca.pem", env=oms_env)
    git(git_repo, "commit", "-qm", "test ca", env=oms_env)
    assert run_oms(["init", "--repo", str(git_repo)]).returncode == 0
    curl = "curl -q -sS --max-time 60 --cacert ca/ca.pem"
    script = (f"{curl} https://api.anthropic.com/v1/models; echo got=$?; "
              f"{curl} https://example.com/ >/dev/null 2>&1; echo other=$?")  # fmt: skip
    with tls_http_server(ca) as server:
        host, port = server.server_address[:2]
        proc = run_oms(
            ["agent", "run", "--repo", str(git_repo), "--egress", "tunnel", "--json",
             *_sh(script)],
            env_extra={"OMS_EGRESS_TUNNEL_CONNECT": f"api.anthropic.com={host}:{port}"},
            timeout=180,
        )  # fmt: skip
    out = parse_single_json(proc)
    assert out["exit_code"] == 0, out
    assert "hello from the fake provider" in out["stdout"] and "got=0" in out["stdout"]
    assert "other=0" not in out["stdout"] and "oms-end" in out["stdout"]
    assert server.seen_sni == ["api.anthropic.com"]
    assert out["egress_mode"] == "tunnel"
    _, store = open_store(git_repo)
    tunnels = sorted((p for _, p in store.payloads(TunnelConnection)), key=lambda t: t.host)
    assert [(t.host, t.action) for t in tunnels] == [
        ("api.anthropic.com", "connected"),
        ("example.com", "refused"),
    ]
    assert tunnels[0].bytes_down > 0


MCP_CLIENT = r"""
import json, subprocess, sys
p = subprocess.Popen(["oms", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(o):
    p.stdin.write(json.dumps(o) + "\n"); p.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": sys.argv[1], "capabilities": {},
    "clientInfo": {"name": "agent", "version": "1"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "oms_transfer_preview", "arguments": {"to": "anthropic:claude-sonnet",
    "purpose": "summarise", "context": "paths", "paths": ["README.md"]}}})
print("answer", p.stdout.readline().strip())
p.stdin.close(); p.wait()
"""


def test_oms_mcp_inside_previews_in_the_real_log_under_the_runs_name(
    run_oms: RunOms, git_repo: Path
) -> None:
    """The agent's `oms mcp` reaches the server outside: its transfer preview lands in the
    repository's real log, with the run as a subject; approving stays impossible inside."""
    assert run_oms(["init", "--repo", str(git_repo)]).returncode == 0
    proc = run_oms(
        ["agent", "run", "--repo", str(git_repo), "--json", "--", sys.executable, "-I", "-c",
         MCP_CLIENT, LATEST_PROTOCOL_VERSION],
        timeout=180,
    )  # fmt: skip
    out = parse_single_json(proc)
    assert out["exit_code"] == 0, out
    answer = json.loads(out["stdout"].split("answer ", 1)[1].splitlines()[0])
    assert "result" in answer, answer
    _, store = open_store(git_repo)
    previews = store.entries("transfer.preview")
    assert len(previews) == 1
    names = [s.name for s in previews[0].subject]
    assert f"agent-run:{out['run_id']}" in names, names


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_oms_stops_the_agent_and_still_writes_the_end_entry(
    git_repo: Path, oms_env: dict[str, str], oms_home: Path, signum: int
) -> None:
    assert run_oms_in(["init", "--repo", str(git_repo)], env=oms_env).returncode == 0
    proc = subprocess.Popen(
        [*OMS, "agent", "run", "--repo", str(git_repo), "--json", "--", "/bin/sh", "-c",
         "echo x > started.txt; sleep 120"],
        env=oms_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    work = Path(oms_env["HOME"]) / ".local" / "share" / "oms" / "work"
    for _ in range(600):  # the agent has started once its file is in the workspace
        if list(work.glob("*/started.txt")) or proc.poll() is not None:
            break
        time.sleep(0.1)
    assert list(work.glob("*/started.txt")), proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    data = json.loads(out)
    if signum != signal.SIGINT:  # Ctrl-C keeps the CLI's own answer to it
        assert proc.returncode == 4, (out, err)
        assert data["error"]["kind"] == "unavailable" and "interrupted" in data["error"]["message"]
        assert end_of_run(git_repo).run_id == data["run_id"]
    assert proc.returncode != 0
    end = end_of_run(git_repo)
    assert end.refused and "interrupted" in end.refused and end.reason == "interrupted"
    assert end.candidate is None


def end_of_run(repo: Path) -> AgentRunEnd:
    _, store = open_store(repo)
    [(_, end)] = store.payloads(AgentRunEnd)
    return end
