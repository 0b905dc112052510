"""`oms agent run` benchmarks: start-up overhead beyond bare bwrap, and the broker's cost.

Issue 33's row (recorded with `rows.record`): `oms agent run --egress none -- true`, the whole
CLI on a 10-file repository, <= 200 ms (its ratio to bare `bwrap … true` in the same run), and
the in-process overhead beyond bwrap <= 120 ms; where the in-process time goes is printed
phase by phase. The probe runs as the first process of the command's own sandbox, so its time
is inside `_execute`; `_probe` is the check of its report outside, `_record_start` included.

Anchors and goals (issue 12):
- start-up of `oms agent run --egress none -- true` beyond bare `bwrap … true`: <= 150 ms,
  clone, probe and evidence included (anchor: the check profile's 6.75 ms per-run overhead
  plus a clone). Measured in a warm process (the run itself) and, for the record, as the
  whole CLI (interpreter start and imports included).
- broker overhead per request on a conversation growing to 1 MB in 20 turns: p50 <= 1.2x
  the fake's own p50 plus one Gitleaks start-up per turn; scanned bytes <= 1.1x new bytes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent_broker_bench import bench_broker
from rows import record
from sandbox_bench import median_ms

import gatekeeper.agent.run as run_module
from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.gates.records import init
from sandbox import find_bwrap

ROUNDS = 9 if "--quick" in sys.argv else 21
GOAL_MS = 150.0
ROW_GOAL_MS, ROW_OVERHEAD_MS = 200.0, 120.0  # issue 33
# One run's steps in gatekeeper/agent/run.py (the clone is inside `_prepare`, `_probe` and
# `_record_start` inside `_execute`), in order.
PHASES = ((run_module, "_prepare"), (run_module, "create_workspace"),
          (run_module, "_profile"), (run_module, "_start_egress"), (run_module, "_probe"),
          (run_module, "_record_start"), (run_module, "_execute"), (run_module, "_collect"),
          (run_module, "_record_end"))  # fmt: skip


def _repo(root: Path, files: int) -> Path:
    root.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    for i in range(files):
        d = root / f"pkg{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * 20)
    for args in (["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@x", "commit",
                                  "-qm", "bench"]):  # fmt: skip
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env)
    return root


def _bare_bwrap_ms() -> float:
    bw = find_bwrap().path
    argv = [bw, "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr",
            "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
            "--", "/bin/true"]  # fmt: skip
    return median_ms(lambda: subprocess.run(argv, check=True), ROUNDS)


@contextmanager
def _timed_phases() -> Iterator[dict[str, list[float]]]:
    """Each phase's wall time per call while the block runs (its functions wrapped)."""
    spent: dict[str, list[float]] = defaultdict(list)
    saved = [(mod, name, getattr(mod, name)) for mod, name in PHASES]

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name].append((time.perf_counter() - t) * 1000)

        return wrapper

    for mod, name, fn in saved:
        setattr(mod, name, timed(name, fn))
    try:
        yield spent
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def bench_startup() -> list[str]:
    base = Path(tempfile.mkdtemp(prefix="oms-bench-agent-"))
    os.environ["OMS_HOME"] = str(base / "state")
    os.environ["OMS_WORK_DIR"] = str(base / "work")
    lines: list[str] = []
    warm10 = 0.0
    bare = _bare_bwrap_ms()
    lines.append(f"bare bwrap … true: {bare:.1f} ms (median of {ROUNDS})")
    for files in (10, 2000):
        repo = _repo(base / f"repo{files}", files)
        init(repo)
        req = AgentRunRequest(repo_dir=repo, cmd=("true",), egress="none", capture=True)
        agent_run(req)  # warm: the mirror, bwrap's feature probe, imports
        with _timed_phases() as spent:  # the wrappers' own cost is a few µs
            run_ms = median_ms(lambda req=req: agent_run(req), ROUNDS)  # type: ignore[misc]
        over = run_ms - bare
        verdict = "met" if over <= GOAL_MS else "NOT MET"
        lines.append(f"oms agent run --egress none -- true, {files} files (warm process): "
                     f"{run_ms:.1f} ms, overhead {over:.1f} ms beside goal {GOAL_MS:.0f} ms "
                     f"(anchor 6.75 ms check profile + a clone): {verdict}")  # fmt: skip
        lines += [f"  {name}: {statistics.median(ms):.1f} ms" for name, ms in spent.items()]
        if files == 10:
            warm10 = run_ms
    cli = [sys.executable, "-m", "gatekeeper", "agent", "run", "--repo", str(base / "repo10"),
           "--egress", "none", "--json", "--", "true"]  # fmt: skip
    cold = median_ms(lambda: subprocess.run(cli, check=True, capture_output=True), 5)
    lines.append(f"the whole CLI (interpreter start and imports included): {cold:.1f} ms, "
                 f"{cold - bare:.1f} ms beyond bare bwrap")  # fmt: skip
    record("oms agent run --egress none -- true (10-file repo)", f"{cold:.0f} ms",
           f"bare bwrap … true {bare:.1f} ms", cold / bare, f"<= {ROW_GOAL_MS:.0f} ms",
           cold <= ROW_GOAL_MS)  # fmt: skip
    over = warm10 - bare
    record("agent run in-process overhead beyond bwrap", f"{over:.0f} ms",
           f"bare bwrap … true {bare:.1f} ms", warm10 / bare, f"<= {ROW_OVERHEAD_MS:.0f} ms",
           over <= ROW_OVERHEAD_MS)  # fmt: skip
    return lines


def main() -> int:
    for line in bench_startup():
        print(line)
    bench_broker()  # prints its own figures beside their anchors
    return 0


if __name__ == "__main__":
    sys.exit(main())
