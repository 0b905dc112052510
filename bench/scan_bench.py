"""Scanner benchmark: both scanners on a 1 MB change, and recall on the fake-secret corpus.

Anchors measured on this machine: `gitleaks stdin` alone on 1 MB 1.46 s; detect-secrets
run naively (every plugin on every line) 11.9 s. Goals, each <= 1.7x Gitleaks alone:
the combined scan the gate runs (Gitleaks started first, working while detect-secrets
runs in this process), and the whole command `oms scan --stdin --json` (a new Python
process, start-up included) beside `gitleaks stdin` with oms' config on the same bytes;
and the union of findings loses nothing either scanner found.

    .venv/bin/python bench/scan_bench.py [--quick] [--cli-only]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import Planted, item_bytes, make_change

import gatekeeper.scan.detect_secrets as ds_module
from gatekeeper.scan import Finding
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.detect_secrets import DetectSecrets
from gatekeeper.scan.gitleaks import CONFIG, LEAKS_EXIT, Gitleaks, locate
from policy import DEFAULT_GITLEAKS_SHA256

T = TypeVar("T")
SIZE = 1_000_000
TIMEOUT_S = 120
ANCHOR_GITLEAKS_S = 1.46
ANCHOR_DS_NAIVE_S = 11.9
GOAL_RATIO = 1.7


def timed(fn: Callable[[], T], runs: int) -> tuple[float, T]:
    """Median wall time over `runs` calls, and the last result."""
    times = []
    result: T
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def gitleaks_stdin_alone(data: bytes) -> int:
    """The bare binary on the same bytes: `gitleaks stdin`, default rules, JSON to stdout."""
    with tempfile.TemporaryDirectory(prefix="oms-bench-gl-") as work:
        proc = subprocess.run(
            [locate(), "stdin", "--no-banner", "--log-level", "error", "--exit-code", "42",
             "--report-format", "json", "--report-path", "-"],
            input=data, capture_output=True, cwd=work, env={"PATH": "/usr/bin:/bin"},
            check=False, timeout=TIMEOUT_S,
        )  # fmt: skip
    if proc.returncode not in (0, 42):
        raise SystemExit(f"gitleaks stdin failed: exit {proc.returncode}")
    return len(json.loads(proc.stdout))


def gitleaks_stdin_as_oms_configures_it(data: bytes, work: Path) -> int:
    """`gitleaks stdin` with oms' config and suppressions off: the anchor of the CLI figure."""
    config, ignore = work / "oms-gitleaks.toml", work / "ignore"
    config.write_bytes(CONFIG)
    ignore.mkdir(exist_ok=True)
    proc = subprocess.run(
        [locate(), "stdin", "-c", str(config), "--gitleaks-ignore-path", str(ignore),
         "--ignore-gitleaks-allow", "--no-banner", "--no-color", "--log-level", "error",
         "--exit-code", str(LEAKS_EXIT), "--report-format", "json", "--report-path", "-"],
        input=data, capture_output=True, cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(work)},
        check=False, timeout=TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode not in (0, LEAKS_EXIT):
        raise SystemExit(f"gitleaks stdin failed: exit {proc.returncode}")
    return len(json.loads(proc.stdout))


def oms_scan_stdin(data: bytes, repo: Path) -> int:
    """The whole command, as a user runs it in a repository: a new process, start-up included."""
    proc = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "scan", "--stdin", "--json"],
        input=data, capture_output=True, cwd=repo, check=False, timeout=TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode != 3:
        raise SystemExit(f"oms scan --stdin: exit {proc.returncode} (3 expected): {proc.stderr!r}")
    return len(json.loads(proc.stdout)["findings"])


def a_repository(where: Path) -> Path:
    """A repository with one commit and no oms.toml: `oms scan` reads its policy at HEAD."""
    repo = where / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README").write_text("bench\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)
    return repo


def cli_figure(data: bytes, runs: int) -> float:
    """Median of paired ratios `oms scan --stdin` / `gitleaks stdin`, interleaved."""
    bare, cli, ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="oms-bench-cli-") as tmp:
        repo = a_repository(Path(tmp))
        for _ in range(runs):
            t_bare, _n = timed(lambda: gitleaks_stdin_as_oms_configures_it(data, Path(tmp)), 1)
            t_cli, found = timed(lambda: oms_scan_stdin(data, repo), 1)
            bare.append(t_bare)
            cli.append(t_cli)
            ratios.append(t_cli / t_bare)
    med = statistics.median
    ratio = med(ratios)
    print(f"CLI to CLI on {len(data) / 1e6:.2f} MB, medians of {runs} interleaved runs:")
    print(f"  gitleaks stdin (oms' config):        {med(bare):5.2f} s [{min(bare):.2f}]")
    print(
        f"  oms scan --stdin --json (whole run): {med(cli):5.2f} s [{min(cli):.2f}]"
        f"   = {ratio:.2f}x (median of paired ratios; {med(cli) / med(bare):.2f}x of medians)"
        f"   goal <= {GOAL_RATIO}x   {'MET' if ratio <= GOAL_RATIO else 'NOT MET'}"
        f"   ({found} findings)"
    )
    return ratio


@contextmanager
def stock_detect_secrets() -> Iterator[None]:
    """detect-secrets' own pipeline on every line: the prefilter passes everything."""
    saved = ds_module.Prefilter
    ds_module.Prefilter = lambda plugins: lambda path, lines: list(lines)  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        ds_module.Prefilter = saved  # type: ignore[misc]


def where(findings: list[Finding]) -> set[tuple[str, int]]:
    return {(f.file, f.line) for f in findings}


def hit(p: Planted, places: set[tuple[str, int]]) -> bool:
    return any((p.path, n) in places for n in range(p.first, p.last + 1))


def main() -> int:
    quick = "--quick" in sys.argv
    runs = 2 if quick else 5
    items, planted = make_change(seed=7, target_bytes=SIZE)
    data = ("\n".join(t for it in items for _, t in it.lines) + "\n").encode()
    lines = sum(len(it.lines) for it in items)
    print(
        f"change: {item_bytes(items) / 1e6:.2f} MB, {len(items)} files, {lines} lines, "
        f"{len(planted)} planted secrets"
    )
    cli_figure(data, runs if quick else 7)
    if "--cli-only" in sys.argv:
        return 0

    # Interleaved, so that both sides of the ratio see the same machine load.
    gl = Gitleaks(DEFAULT_GITLEAKS_SHA256, TIMEOUT_S)
    bare, combined, ratios, gl_oms, ds_alone = [], [], [], [], []
    for _ in range(runs):
        t_bare, _n = timed(lambda: gitleaks_stdin_alone(data), 1)
        t_both, (union, _infos) = timed(
            lambda: scan_both(items, DEFAULT_GITLEAKS_SHA256, TIMEOUT_S), 1
        )
        t_gl, gl_findings = timed(lambda: gl.scan(items), 1)
        t_ds, ds_findings = timed(lambda: DetectSecrets().scan(items), 1)
        bare.append(t_bare)
        combined.append(t_both)
        ratios.append(t_both / t_bare)
        gl_oms.append(t_gl)
        ds_alone.append(t_ds)
    med = statistics.median
    naive = None
    if not quick:
        with stock_detect_secrets():
            naive, naive_findings = timed(lambda: DetectSecrets().scan(items), 1)

    ratio = med(ratios)
    print(f"medians of {runs} interleaved runs (min in brackets)")
    print(
        f"gitleaks stdin alone (bare binary):  {med(bare):5.2f} s [{min(bare):.2f}]"
        f"   anchor {ANCHOR_GITLEAKS_S} s"
    )
    print(f"gitleaks via oms (digest checked):   {med(gl_oms):5.2f} s [{min(gl_oms):.2f}]")
    print(f"detect-secrets via oms (prefilter):  {med(ds_alone):5.2f} s [{min(ds_alone):.2f}]")
    if naive is not None:
        print(
            f"detect-secrets naive (stock pipeline, every line): {naive:5.2f} s"
            f"   anchor {ANCHOR_DS_NAIVE_S} s   prefilter speed-up {naive / med(ds_alone):.1f}x"
        )
    print(
        f"combined scan_both:                  {med(combined):5.2f} s [{min(combined):.2f}]"
        f"   = {ratio:.2f}x gitleaks alone (median of paired ratios)   goal <= {GOAL_RATIO}x"
        f"   {'MET' if ratio <= GOAL_RATIO else 'NOT MET'}"
    )

    # Recall on the corpus, by (file, line): each scanner alone and the union scan_both gives.
    gl_at, ds_at, union_at = where(gl_findings), where(ds_findings), where(union)
    lost = (gl_at | ds_at) - union_at
    assert not lost, f"scan_both lost findings: {sorted(lost)[:5]}"
    assert union_at >= gl_at and union_at >= ds_at
    if naive is not None:
        exact = {(f.rule, f.file, f.line, f.fingerprint) for f in ds_findings}
        stock = {(f.rule, f.file, f.line, f.fingerprint) for f in naive_findings}
        print(f"prefilter exact on the 1 MB change: {exact == stock} ({len(exact)} findings)")
        assert exact == stock
    print()
    print(f"{'kind':34} gitleaks  detect-secrets  union")
    mark = {True: "yes", False: "-"}
    for p in planted:
        g, d, u = hit(p, gl_at), hit(p, ds_at), hit(p, union_at)
        print(f"{p.kind:34} {mark[g]:9} {mark[d]:15} {mark[u]}")
    n = len(planted)
    g = sum(hit(p, gl_at) for p in planted)
    d = sum(hit(p, ds_at) for p in planted)
    u = sum(hit(p, union_at) for p in planted)
    print(
        f"recall: gitleaks {g}/{n} ({g / n:.0%}), detect-secrets {d}/{n} ({d / n:.0%}), "
        f"union {u}/{n} ({u / n:.0%}); union keeps all {len(gl_at | ds_at)} flagged lines"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
