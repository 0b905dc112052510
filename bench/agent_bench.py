"""`oms agent run` benchmarks: start-up overhead beyond bare bwrap, and the broker's cost.

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
import subprocess
import sys
import tempfile
from pathlib import Path

from agent_broker_bench import bench_broker
from sandbox_bench import median_ms

from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.gates.records import init
from sandbox import find_bwrap

ROUNDS = 9 if "--quick" in sys.argv else 21
GOAL_MS = 150.0


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


def bench_startup() -> list[str]:
    base = Path(tempfile.mkdtemp(prefix="oms-bench-agent-"))
    os.environ["OMS_HOME"] = str(base / "state")
    os.environ["OMS_WORK_DIR"] = str(base / "work")
    lines = []
    bare = _bare_bwrap_ms()
    lines.append(f"bare bwrap … true: {bare:.1f} ms (median of {ROUNDS})")
    for files in (10, 2000):
        repo = _repo(base / f"repo{files}", files)
        init(repo)
        req = AgentRunRequest(repo_dir=repo, cmd=("true",), egress="none", capture=True)
        agent_run(req)  # warm: the mirror, bwrap's feature probe, imports
        run_ms = median_ms(lambda req=req: agent_run(req), ROUNDS)  # type: ignore[misc]
        over = run_ms - bare
        verdict = "met" if over <= GOAL_MS else "NOT MET"
        lines.append(f"oms agent run --egress none -- true, {files} files (warm process): "
                     f"{run_ms:.1f} ms, overhead {over:.1f} ms beside goal {GOAL_MS:.0f} ms "
                     f"(anchor 6.75 ms check profile + a clone): {verdict}")  # fmt: skip
    cli = [sys.executable, "-m", "gatekeeper", "agent", "run", "--repo", str(base / "repo10"),
           "--egress", "none", "--json", "--", "true"]  # fmt: skip
    cold = median_ms(lambda: subprocess.run(cli, check=True, capture_output=True), 5)
    lines.append(f"the whole CLI (interpreter start and imports included): {cold:.1f} ms, "
                 f"{cold - bare:.1f} ms beyond bare bwrap")  # fmt: skip
    return lines


def main() -> int:
    for line in bench_startup():
        print(line)
    bench_broker()  # prints its own figures beside their anchors
    return 0


if __name__ == "__main__":
    sys.exit(main())
