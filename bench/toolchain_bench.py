"""Trusted toolchain benchmarks (issue 13): a cached `prepare` beside `verify`, and a
200-test pytest suite run by the gate with a python-venv toolchain beside the same suite
run unsandboxed with that toolchain's python.

Goals: `oms toolchain prepare` on a cached second run <= 1.1x `oms toolchain verify`
(nothing rebuilt: both digest the tree); the check's own duration in the gate vs the
unsandboxed run <= 1.10 (anchor 0.998 on a stdlib-only suite, sandbox_bench). Both
measured as the whole CLI, medians of N. Only the first `prepare` contacts a registry
(PyPI, through pip); everything else is local.

    .venv/bin/python bench/toolchain_bench.py [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from sandbox_bench import median_ms

# The hash-pinned lock the e2e tests use (pytest and its dependencies among it).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.toolchains import python_lock

QUICK = "--quick" in sys.argv
RUNS = 3 if QUICK else 7
TESTS = 200
CHECK_CMD = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
POLICY = f"""version = 1
[[toolchains]]
name = "py"
kind = "python-venv"
lock = "requirements.lock"

[[checks]]
name = "tests"
cmd = {json.dumps(CHECK_CMD)}
toolchain = "py"
timeout_s = 600
"""
OMS = [sys.executable, "-m", "gatekeeper"]


GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          env={**os.environ, **GIT_ENV}).stdout  # fmt: skip


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", message)


def _test_file(f: int, count: int) -> str:
    # A little real work per test, as sandbox_bench's stdlib suite does.
    return "\n".join(
        f"def test_{f}_{i}():\n    n = {i} * 100\n    assert sum(range(n)) == n * (n - 1) // 2\n"
        for i in range(count)
    )


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "oms.toml").write_text(POLICY)
    (repo / "requirements.lock").write_text(python_lock())
    (repo / "tests").mkdir()
    for f in range(TESTS // 50):
        (repo / "tests" / f"test_gen_{f}.py").write_text(_test_file(f, 50))
    _commit(repo, "base")
    _git(repo, "checkout", "-q", "-b", "agent")
    (repo / "tests" / "test_added.py").write_text(_test_file(99, 1))
    _commit(repo, "add a test")
    _git(repo, "checkout", "-q", "main")
    return repo


def _oms(env: Mapping[str, str], *args: str) -> dict[str, object]:
    proc = subprocess.run([*OMS, *args], env=dict(env), capture_output=True, text=True,
                          check=False)  # fmt: skip
    out: dict[str, object] = json.loads(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"oms {args[0]} {args[1]}: exit {proc.returncode}: {out.get('error')}")
    return out


def bench_prepare(env: Mapping[str, str], repo: Path) -> dict[str, object]:
    t = time.perf_counter()
    first = _oms(env, "toolchain", "prepare", "--repo", str(repo), "--json")
    built = time.perf_counter() - t
    tc = first["toolchains"][0]  # type: ignore[index]
    print(f"first prepare (pip from PyPI, {tc['files']} files, {tc['bytes']} bytes): "
          f"{built:.2f} s, {tc['state']}")  # fmt: skip
    prep_args = ("toolchain", "prepare", "--repo", str(repo), "--json")
    ver_args = ("toolchain", "verify", "--repo", str(repo), "--json")
    prep = median_ms(lambda: _oms(env, *prep_args), RUNS) / 1000
    ver = median_ms(lambda: _oms(env, *ver_args), RUNS) / 1000
    print(f"prepare (cached) {prep:.3f} s, verify {ver:.3f} s, ratio {prep / ver:.3f}  "
          f"goal <= 1.1   (whole CLI, median of {RUNS})")  # fmt: skip
    return tc  # type: ignore[no-any-return]


def _plain_env(root: Path, record: Mapping[str, object]) -> dict[str, str]:
    """What the check sees inside, less the sandbox: the toolchain's bin/ first on PATH."""
    bins = [str(b) for b in record["bin_dirs"]]  # type: ignore[attr-defined]
    env = {"PATH": ":".join([*bins, "/usr/local/bin:/usr/bin:/bin"]), "HOME": str(root / "home"),
           "LANG": "C.UTF-8", "TZ": "UTC"}  # fmt: skip
    env.update(dict(record["env"]))  # type: ignore[call-overload]
    return env


def _unsandboxed_s(root: Path, repo: Path, env: Mapping[str, str]) -> float:
    """One run of the check's command on a fresh plain checkout of the candidate (fresh as
    the gate's scratch copy is, so that no bytecode of an earlier run is reused)."""
    plain = Path(tempfile.mkdtemp(prefix="plain-", dir=root))
    archive = _git(repo, "archive", "agent")
    subprocess.run(["tar", "-x", "-C", str(plain)], input=archive, check=True)
    t = time.perf_counter()
    r = subprocess.run(CHECK_CMD, cwd=plain, env=dict(env), capture_output=True, check=False)
    took = time.perf_counter() - t
    subprocess.run(["rm", "-rf", str(plain)], check=True)
    if r.returncode != 0:
        raise SystemExit(f"unsandboxed pytest failed: {r.stdout[-400:]!r} {r.stderr[-400:]!r}")
    return took


def bench_gate(
    env: Mapping[str, str], root: Path, repo: Path, record: Mapping[str, object]
) -> None:
    walls, checks, stages = [], [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        proc = subprocess.run(
            [*OMS, "process-result", "--repo", str(repo), "--candidate", "agent",
             "--base", "main", "--json"],
            env=dict(env), capture_output=True, text=True, check=False,
        )  # fmt: skip
        walls.append(time.perf_counter() - t)
        out = json.loads(proc.stdout)
        if out.get("decision") != "READY_FOR_HUMAN":
            raise SystemExit(f"unexpected verdict: {out.get('decision')} {out.get('reasons')} "
                             f"{out.get('error')}")  # fmt: skip
        checks.append(out["checks"][0]["duration_ms"] / 1000)
        stages.append(out["timings_ms"])
    plain_env = _plain_env(root, record)
    plain = [_unsandboxed_s(root, repo, plain_env) for _ in range(RUNS)]
    sb, un = statistics.median(checks), statistics.median(plain)
    print(
        f"pytest, {TESTS + 1} tests: sandboxed {sb:.3f} s, unsandboxed {un:.3f} s, "
        f"ratio {sb / un:.3f}  goal <= 1.10 (anchor 0.998 stdlib-only)  (median of {RUNS})"
    )
    print(f"gate wall time (CLI): {statistics.median(walls):.2f} s")
    for stage in stages[0]:
        print(f"  {stage:<12} {statistics.median(s.get(stage, 0) for s in stages):6.0f} ms")


def _bench_env(root: Path) -> dict[str, str]:
    """This environment less OMS_*/XDG_*/GIT_*, with every state, cache and home inside."""
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMS_", "XDG_", "GIT_"))}
    inside = {
        "HOME": home,
        "OMS_HOME": root / "state",
        "OMS_TOOLCHAIN_DIR": root / "toolchains",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local/state",
        "XDG_DATA_HOME": home / ".local/share",
        "XDG_CONFIG_HOME": home / ".config",
    }
    env.update({k: str(v) for k, v in inside.items()})
    return {**env, **GIT_ENV}


def main() -> int:
    # Directly under the system temp dir and traversable (0755), as oms' own scratch copies
    # are, so that an unprivileged sandbox uid (when run as root) reaches the toolchain.
    root = Path(tempfile.mkdtemp(prefix="oms-bench-toolchain-"))
    root.chmod(0o755)
    try:
        env = _bench_env(root)
        repo = _repo(root)
        _oms(env, "init", "--repo", str(repo), "--json")
        tc = bench_prepare(env, repo)
        hexid = str(tc["id"]).removeprefix("sha256:")
        record = json.loads((root / "state" / "toolchains" / f"{hexid}.json").read_text())
        bench_gate(env, root, repo, record)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
