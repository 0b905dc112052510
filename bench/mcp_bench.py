"""MCP server benchmark: `tools/call` latency on a generated 10,000-file repository.

    .venv/bin/python bench/mcp_bench.py [--quick]

Real `oms mcp` subprocesses over stdio, each started with an empty scan-result cache
(`oms cache clear`). For each operation, p50/p95 over N calls, beside the anchors
measured here on the same files:

- `oms_repo_read_file` cold (each call a file no call has read: both scanners run)
  and warm (the same files again: answered from the cache, no scanner), beside the
  `oms_status` round trip; goal: warm p50 <= 50 ms. Also warm in a restarted server
  (the cache outlives the process), and a random file after a whole search; beside
  reading the file in Python and the in-process redaction pass with no cache;
- `oms_repo_search` (a literal query found in a few files, so every file is read),
  cold and warm, over one folder and over the whole repository, beside a literal
  scan of the same files in Python;
- `oms_status` as the round-trip floor of one `tools/call` through the server.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from gatekeeper.mcp import gateway as repo_gateway
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit

WORDS = ["value", "config", "result", "items", "handler", "request", "data", "count", "total"]
QUERY = "needle_rare_literal"
WARM_GOAL_MS = 50
BEFORE_MS = 452  # the oms_repo_read_file p50 before the scan-result cache


def code_file(rng: random.Random, i: int, with_needle: bool) -> str:
    lines = [f'"""Module {i}."""', ""]
    for n in range(rng.randint(20, 60)):
        a, b, c = rng.sample(WORDS, 3)
        lines.append(f"def {a}_{i}_{n}({b}, {c}):\n    return {b} + {c} * {rng.randint(0, 99)}")
    if with_needle:
        lines.append(f"# {QUERY} in module {i}")
    return "\n".join(lines) + "\n"


def make_repo(root: Path, n_files: int, env: dict[str, str]) -> tuple[Path, list[str]]:
    rng = random.Random(11)
    repo = root / "repo"
    repo.mkdir()
    needles = set(rng.sample(range(n_files), 8))
    names = []
    for i in range(n_files):
        rel = f"pkg{i // 100:03d}/mod_{i:05d}.py"
        p = repo / rel
        p.parent.mkdir(exist_ok=True)
        p.write_text(code_file(rng, i, i in needles))
        names.append(rel)
    (repo / "oms.toml").write_text('version = 1\n[[checks]]\nname = "t"\ncmd = ["/bin/true"]\n')

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)

    git("init", "-q", "-b", "main")
    git("config", "user.name", "bench")
    git("config", "user.email", "bench@example.invalid")
    git("add", "-A")
    git("commit", "-q", "-m", "generated")
    subprocess.run([sys.executable, "-m", "gatekeeper", "init", "--repo", str(repo), "--json"],
                   check=True, capture_output=True, env=env)  # fmt: skip
    return repo, names


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def row(label: str, samples_s: list[float]) -> str:
    ms = [x * 1000 for x in samples_s]
    return (
        f"  {label:<60} p50 {pct(ms, 0.5):8.2f} ms   p95 {pct(ms, 0.95):8.2f} ms"
        f"   (n={len(ms)}, mean {statistics.fmean(ms):.2f})"
    )


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def literal_scan(top: Path, names: list[str], query: bytes) -> list[tuple[str, int]]:
    """The anchor for search: read every file and find the literal, in Python."""
    hits = []
    for f in names:
        data = (top / f).read_bytes()
        if query in data:
            for n, line in enumerate(data.split(b"\n"), 1):
                if query in line:
                    hits.append((f, n))
    return hits


def oms_cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "gatekeeper", *args, "--json"], check=True,
                         capture_output=True, text=True, env=env)  # fmt: skip
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


@dataclass
class Plan:
    """What one bench run reads and searches: files read cold then warm, and folders
    searched cold then warm (none holding a file read), each seen by no call before."""

    reads: list[str]
    folders: list[str]
    calls: int

    @classmethod
    def of(cls, names: list[str], calls: int, rng: random.Random) -> Plan:
        folders = sorted({n.split("/")[0] for n in names})
        half = len(folders) // 2
        readable = [n for n in names if n.split("/")[0] in folders[:half]]
        return cls(rng.sample(readable, calls), folders[half:][:calls], calls)


class Client:
    """One `oms mcp` server over stdio and its session; every call timed under a key."""

    def __init__(self, session: ClientSession, out: dict[str, list[float]]) -> None:
        self.session = session
        self.out = out

    async def call(self, key: str, name: str, args: dict[str, Any]) -> types.CallToolResult:
        t = time.perf_counter()
        res = await self.session.call_tool(name, args)
        self.out.setdefault(key, []).append(time.perf_counter() - t)
        assert isinstance(res, types.CallToolResult) and not res.is_error, res
        return res


@asynccontextmanager
async def served(repo: Path, env: dict[str, str], out: dict[str, list[float]],
                 name: str) -> AsyncIterator[Client]:  # fmt: skip
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "gatekeeper", "mcp", "--repo", str(repo)],
                                   env=env, cwd=str(repo.parent))  # fmt: skip
    with open(repo.parent / f"server-{name}.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as s:
            t = time.perf_counter()
            await s.initialize()
            out.setdefault(f"initialize_{name}", []).append(time.perf_counter() - t)
            client = Client(s, out)
            await client.call("warmup", "oms_status", {})  # imports, policy load
            yield client


async def measure_server(repo: Path, env: dict[str, str], names: list[str], plan: Plan,
                         rng: random.Random) -> dict[str, list[float]]:  # fmt: skip
    """Two servers, each from an empty scan-result cache (`oms cache clear`).

    First: the status floor; `plan.reads` cold (no server, search or read saw them), then
    the same files warm; `plan.folders` searched cold, then warm. Second, restarted: the
    same files read again (the cache kept them: a new process, no scanner), then a cold
    search of the whole repository (cache cleared), the same search warm, random reads.
    """
    out: dict[str, list[float]] = {}
    oms_cli(env, "cache", "clear")
    async with served(repo, env, out, "first") as c:
        for _ in range(plan.calls):
            await c.call("status", "oms_status", {})
        for key in ("read_cold", "read_warm"):
            for path in plan.reads:
                await c.call(key, "oms_repo_read_file", {"path": path})
        for key in ("folder_cold", "folder_warm"):
            for folder in plan.folders:
                await c.call(key, "oms_repo_search", {"query": QUERY, "path": folder})
    async with served(repo, env, out, "second") as c:
        for path in plan.reads:
            await c.call("read_restarted", "oms_repo_read_file", {"path": path})
        oms_cli(env, "cache", "clear")
        await c.call("search_cold", "oms_repo_search", {"query": QUERY})
        for _ in range(plan.calls):
            res = await c.call("search", "oms_repo_search", {"query": QUERY})
        assert res.structured_content and len(res.structured_content["data"]["results"]) == 8
        for _ in range(plan.calls):
            await c.call("read_file", "oms_repo_read_file", {"path": rng.choice(names)})
    return out


def main() -> int:
    quick = "--quick" in sys.argv
    n_files = 2_000 if quick else 10_000
    calls = 10 if quick else 30
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="oms-mcp-bench-") as d:
        root = Path(d)
        (root / "home").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "OMS_", "XDG_"))}
        env.update(HOME=str(root / "home"), OMS_HOME=str(root / "oms-state"),
                   GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)  # fmt: skip
        t = time.perf_counter()
        repo, names = make_repo(root, n_files, env)
        size = sum((repo / f).stat().st_size for f in names)
        print(f"repository: {n_files} files, {size / 1e6:.1f} MB, committed "
              f"(generated in {time.perf_counter() - t:.1f} s)")  # fmt: skip

        plan = Plan.of(names, calls, rng)
        server = anyio.run(measure_server, repo, env, names, plan, rng)

        # Anchors, in this process, on the same files; redaction with the scan-result
        # cache off, so that it is what every answer cost before the cache.
        os.environ.update(HOME=env["HOME"], OMS_HOME=env["OMS_HOME"], OMS_SCAN_CACHE="off",
                          GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)  # fmt: skip
        gw_repo = open_repo(repo)
        policy = read_policy_at(gw_repo.top, resolve_commit(gw_repo.top, "HEAD"))
        picks = [rng.choice(names) for _ in range(calls)]
        it = iter(picks * 2)
        read_py = timed(lambda: (repo / next(it)).read_bytes().decode("utf-8", "replace"), calls)
        texts = [(f, (repo / f).read_text()) for f in picks]
        it2 = iter(texts)
        redact = timed(lambda: repo_gateway.redact_text(gw_repo, *next(it2), policy), calls)
        scan_py = timed(lambda: literal_scan(repo, names, QUERY.encode()), calls)
        assert len(literal_scan(repo, names, QUERY.encode())) == 8
        files = timed(lambda: repo_gateway.served_files(gw_repo, ""), min(calls, 10))
        ls_argv = ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                   "--exclude-standard"]  # fmt: skip
        ls = timed(lambda: subprocess.run(ls_argv, check=True, capture_output=True, env=env), 10)

    report(server, calls, n_files // len({n.split("/")[0] for n in names}))
    print(row("  anchor: read + decode the file in Python", read_py))
    print(row("  anchor: redact_text (both scanners, no cache) in-process", redact))
    print(row("  anchor: literal scan of every file in Python", scan_py))
    print(row("  anchor: served-file listing (ls-files + filters)", files))
    print(row("  anchor: git ls-files alone", ls))
    return 0


def report(server: dict[str, list[float]], calls: int, per_folder: int) -> None:
    start, restart = server["initialize_first"][0], server["initialize_second"][0]
    print(f"MCP tools/call latency ({calls} calls each; stdio; each server from an empty "
          "scan-result cache):")  # fmt: skip
    print(f"  initialize: {start * 1000:.0f} ms (restarted server: {restart * 1000:.0f} ms)")
    print(row("tools/call oms_status (round-trip floor)", server["status"]))
    print(row("tools/call oms_repo_read_file, cold (each file new)", server["read_cold"]))
    print(row("tools/call oms_repo_read_file, warm (same files again)", server["read_warm"]))
    warm = pct([x * 1000 for x in server["read_warm"]], 0.5)
    floor = pct([x * 1000 for x in server["status"]], 0.5)
    verdict = "OK" if warm <= WARM_GOAL_MS else "MISSED"
    print(
        f"    warm read p50 {warm:.2f} ms = {warm / floor:.1f}x the oms_status round trip;"
        f" goal <= {WARM_GOAL_MS} ms {verdict} (before the cache: {BEFORE_MS} ms)"
    )
    print(row("tools/call oms_repo_read_file, warm, restarted server", server["read_restarted"]))
    print(row("tools/call oms_repo_read_file (random file, warm)", server["read_file"]))
    print(row(f"tools/call oms_repo_search, one folder ({per_folder} files), cold",
              server["folder_cold"]))  # fmt: skip
    print(row(f"tools/call oms_repo_search, one folder ({per_folder} files), warm",
              server["folder_warm"]))  # fmt: skip
    print(row("tools/call oms_repo_search, whole repository, cold", server["search_cold"]))
    print(row(f"tools/call oms_repo_search {QUERY!r} (warm)", server["search"]))


if __name__ == "__main__":
    sys.exit(main())
