"""Sandbox benchmarks: per-check overhead, scratch copy cost, a real test suite's ratio.

Anchors measured on this machine: raw bwrap 7.5-8.5 ms. Goals: <= 15 ms total
overhead per check (oms set-up included, scratch copy excluded); scratch copy
of a 2,000-file repo <= 150 ms; a few-hundred-test pytest suite sandboxed vs
unsandboxed <= 1.10x.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gatekeeper.repo.scratch import copy_commit
from policy import SandboxPolicy
from sandbox import check_profile, find_bwrap, run


def median_ms(fn: Callable[[], object], n: int) -> float:
    """The median wall time of `n` calls of `fn`, in ms (agent_bench uses it too)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _make_repo(root: Path, files: int) -> str:
    root.mkdir()
    _git(root, "init", "-q")
    for i in range(files):
        d = root / f"pkg{i // 100}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * 20)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "bench")
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _make_suite(tests: int) -> Path:
    # Directly under the system temp dir, as oms' own scratch copies are, so that the
    # unprivileged sandbox uid (when run as root) can reach it.
    root = Path(tempfile.mkdtemp(prefix="oms-bench-suite-"))
    for f in range(tests // 50):
        body = "\n".join(
            f"def test_{f}_{i}():\n    n = {i} * 100\n"
            "    assert sum(range(n)) == n * (n - 1) // 2\n"
            for i in range(50)
        )
        (root / f"test_gen_{f}.py").write_text(body)
    return root


def _suite_venv() -> Path:
    """A venv with pytest from the system python, where an unprivileged uid can read it."""
    venv = Path(tempfile.gettempdir()) / "oms-bench-venv"
    if not (venv / "bin" / "pytest").exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", "pytest"], check=True, capture_output=True
        )
    return venv


def main() -> int:
    quick = "--quick" in sys.argv
    n = 50 if quick else 200
    bw = find_bwrap()
    profile = check_profile(SandboxPolicy(), timeout_s=60)
    with tempfile.TemporaryDirectory(prefix="oms-bench-") as d:
        tmp = Path(d)
        scratch = tmp / "scratch"
        scratch.mkdir()
        plain = median_ms(lambda: subprocess.run(["true"], check=True), n)
        raw_argv = [bw.path, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                    "--symlink", "usr/lib64", "/lib64", "--", "/bin/true"]  # fmt: skip
        raw = median_ms(lambda: subprocess.run(raw_argv, check=True), n)
        sandboxed = median_ms(lambda: run(profile, scratch, ["/bin/true"], bw=bw), n)
        print(f"`true` unsandboxed:           {plain:6.2f} ms (median of {n})")
        print(f"`true` in raw bwrap:          {raw:6.2f} ms   anchor: raw bwrap 7.5-8.5 ms")
        print(
            f"`true` in oms check profile:  {sandboxed:6.2f} ms   overhead "
            f"{sandboxed - plain:5.2f} ms, goal <= 15 ms"
        )
        repo = tmp / "repo2000"
        sha = _make_repo(repo, 2000)
        copies = []
        for _ in range(5 if quick else 15):
            t = time.perf_counter()
            out = copy_commit(repo, sha)
            copies.append((time.perf_counter() - t) * 1000)
            subprocess.run(["rm", "-rf", str(out)], check=True)
        print(f"scratch copy, 2,000 files:    {statistics.median(copies):6.1f} ms   goal <= 150 ms")
        suite = _make_suite(100 if quick else 400)
        venv = _suite_venv()
        prof = check_profile(SandboxPolicy(ro_paths=[str(venv)]), timeout_s=600)
        py = str(venv / "bin" / "python")
        cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."]
        t = time.perf_counter()
        r = subprocess.run(cmd, cwd=suite, capture_output=True, check=False)
        un = time.perf_counter() - t
        t = time.perf_counter()
        s = run(prof, suite, cmd, bw=bw)
        sb = time.perf_counter() - t
        ok = r.returncode == 0 and s.exit_code == 0
        print(
            f"pytest suite ({100 if quick else 400} tests): unsandboxed {un:.2f} s, "
            f"sandboxed {sb:.2f} s, ratio {sb / un:.3f}   goal <= 1.10"
            + ("" if ok else f"   (FAILED: {r.returncode} / {s.exit_code} {s.stderr.display()})")
        )
        subprocess.run(["rm", "-rf", str(suite)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
