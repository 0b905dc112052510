"""MCP server benchmark: `tools/call` latency on a generated 10,000-file repository.

    .venv/bin/python bench/mcp_bench.py [--quick]

One real `oms mcp` subprocess over stdio, one client session. For each operation,
p50/p95 over N calls, beside the anchors measured here on the same files:

- `oms_repo_read_file` (a random file each call) beside reading that file in
  Python, and beside the in-process redaction pass (both scanners) every answer
  goes through;
- `oms_repo_search` (a literal query found in a few files, so every file is
  read) beside a literal scan of the same files in Python;
- `oms_status` as the round-trip floor of one `tools/call` through the server.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
        f"  {label:<52} p50 {pct(ms, 0.5):8.2f} ms   p95 {pct(ms, 0.95):8.2f} ms"
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


async def measure_server(repo: Path, env: dict[str, str], names: list[str], calls: int,
                         rng: random.Random) -> dict[str, list[float]]:  # fmt: skip
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "gatekeeper", "mcp", "--repo", str(repo)],
                                   env=env, cwd=str(repo.parent))  # fmt: skip
    out: dict[str, list[float]] = {"read_file": [], "search": [], "status": []}
    with open(repo.parent / "server.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w), ClientSession(r, w) as s:
            t = time.perf_counter()
            await s.initialize()
            out["initialize"] = [time.perf_counter() - t]

            async def call(key: str, name: str, args: dict[str, Any]) -> types.CallToolResult:
                t = time.perf_counter()
                res = await s.call_tool(name, args)
                out[key].append(time.perf_counter() - t)
                assert isinstance(res, types.CallToolResult) and not res.is_error, res
                return res

            await call("status", "oms_status", {})  # warm-up (imports, policy load)
            await call("search", "oms_repo_search", {"query": QUERY})
            for key in ("read_file", "search", "status"):
                out[key].clear()
            for _ in range(calls):
                await call("status", "oms_status", {})
            for _ in range(calls):
                await call("read_file", "oms_repo_read_file", {"path": rng.choice(names)})
            for _ in range(calls):
                res = await call("search", "oms_repo_search", {"query": QUERY})
            assert res.structured_content and len(res.structured_content["data"]["results"]) == 8
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

        server = anyio.run(measure_server, repo, env, names, calls, rng)

        # Anchors, in this process, on the same files.
        os.environ.update(HOME=env["HOME"], OMS_HOME=env["OMS_HOME"],
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

    print(f"MCP tools/call latency ({calls} calls each; one server, stdio):")
    print(f"  initialize: {server['initialize'][0] * 1000:.0f} ms")
    print(row("tools/call oms_status (round-trip floor)", server["status"]))
    print(row("tools/call oms_repo_read_file (random file)", server["read_file"]))
    print(row("  anchor: read + decode the file in Python", read_py))
    print(row("  anchor: redact_text (both scanners) in-process", redact))
    print(row(f"tools/call oms_repo_search {QUERY!r}", server["search"]))
    print(row("  anchor: literal scan of every file in Python", scan_py))
    print(row("  anchor: served-file listing (ls-files + filters)", files))
    print(row("  anchor: git ls-files alone", ls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
