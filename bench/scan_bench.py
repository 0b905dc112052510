"""Scanner benchmark: both scanners on a 1 MB change, and recall on the fake-secret corpus.

Anchors measured on this machine: `gitleaks stdin` alone on 1 MB 1.46 s; detect-secrets
run naively (every plugin on every line) 11.9 s. Goals: the combined scan the gate runs
(Gitleaks started first, working while detect-secrets runs in this process) <= 1.7x
Gitleaks alone; the whole command `oms scan --stdin --json` (a new Python process,
start-up included) <= 1.5x `gitleaks stdin` with oms' config on the same bytes, with
recall 10/10 (issue 33's row, recorded through rows.py); and the union of findings loses
nothing either scanner found. Where the command's time goes is printed stage by stage
(one run in a new process: imports, policy, Gitleaks' start, detect-secrets' import and
scan, the wait for Gitleaks, cache and merging, output) with the Gitleaks processes it
started.
The command runs as a user's scan of new content does: the caches on, in the bench's own
`$OMS_HOME`, on bytes no run had (a scan-cache miss: both scanners run; the Gitleaks binary,
verified by an earlier run, is not hashed again). A small clean change is timed too.

    .venv/bin/python bench/scan_bench.py [--quick] [--cli-only]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import Planted, item_bytes, make_change
from rows import record

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
CLI_GOAL_RATIO = 1.5
ROW = "`oms scan --stdin` of a 1 MB diff vs `gitleaks stdin` on the same bytes"
SMALL = b"def add(a, b):\n    return a + b\n"  # a small clean change


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


def scan_env(repo: Path) -> dict[str, str]:
    """The bench's own `$OMS_HOME` beside `repo`, caches on as a user has them: each run's
    input ends with a line no run had (`fresh`), so each is a scan-cache miss and scans,
    while what scans keep between runs (the verified Gitleaks binary) is kept."""
    home = repo.parent / "oms-home"
    home.mkdir(mode=0o700, exist_ok=True)
    return {**os.environ, "OMS_HOME": str(home), "OMS_SCAN_CACHE": "on"}


def fresh(data: bytes) -> bytes:
    """`data` with a last line no earlier run had: the scan-result cache cannot answer it."""
    return data + b"# oms bench run %d\n" % time.time_ns()


def oms_scan_stdin(data: bytes, repo: Path, code: int = 3) -> list[dict[str, object]]:
    """The whole command, as a user runs it in a repository: a new process, start-up included
    (give it `fresh` bytes: a scan-cache hit would skip both scanners)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "scan", "--stdin", "--json"],
        input=data, capture_output=True, cwd=repo, check=False, timeout=TIMEOUT_S,
        env=scan_env(repo),
    )  # fmt: skip
    if proc.returncode != code:
        raise SystemExit(
            f"oms scan --stdin: exit {proc.returncode} ({code} expected): {proc.stderr!r}"
        )
    found: list[dict[str, object]] = json.loads(proc.stdout)["findings"]
    return found


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


def cli_figure(
    data: bytes, runs: int, lines: list[tuple[str, int]], planted: list[Planted]
) -> None:
    """Median of paired ratios `oms scan --stdin` / `gitleaks stdin`, interleaved; the
    command's recall on the planted secrets (`lines`: each stdin line's file and line);
    issue 33's row recorded; then where one run's time goes."""
    bare, cli, ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="oms-bench-cli-") as tmp:
        repo = a_repository(Path(tmp))
        for _ in range(runs):
            new = fresh(data)
            t_bare, _n = timed(partial(gitleaks_stdin_as_oms_configures_it, new, Path(tmp)), 1)
            t_cli, found = timed(partial(oms_scan_stdin, new, repo), 1)
            bare.append(t_bare)
            cli.append(t_cli)
            ratios.append(t_cli / t_bare)
        stages = breakdown(fresh(data), repo)
    med = statistics.median
    ratio = med(ratios)
    at = {lines[int(str(f["line"])) - 1] for f in found}
    recall = sum(hit(p, at) for p in planted)
    met = ratio <= CLI_GOAL_RATIO and recall == len(planted)
    print(f"CLI to CLI on {len(data) / 1e6:.2f} MB, medians of {runs} interleaved runs:")
    print(f"  gitleaks stdin (oms' config):        {med(bare):5.2f} s [{min(bare):.2f}]")
    print(
        f"  oms scan --stdin --json (whole run): {med(cli):5.2f} s [{min(cli):.2f}]"
        f"   = {ratio:.2f}x (median of paired ratios; {med(cli) / med(bare):.2f}x of medians)"
        f"   goal <= {CLI_GOAL_RATIO}x   {'MET' if met else 'NOT MET'}"
        f"   ({len(found)} findings, recall {recall}/{len(planted)})"
    )
    print("  where one run of it goes (a new process; wall seconds, stages in order):")
    for name, seconds in stages.items():
        print(f"    {name:38} {seconds:6.3f}" if isinstance(seconds, float) else
              f"    {name:38} {seconds}")  # fmt: skip
    record(ROW, f"{med(cli):.2f} s, recall {recall}/{len(planted)}",
           f"`gitleaks stdin` on the same bytes {med(bare):.2f} s", ratio,
           f"<= {CLI_GOAL_RATIO}x, recall {len(planted)}/{len(planted)}", met)  # fmt: skip


# Runs `oms scan --stdin --json` in a new process as the console script does, each stage
# timed by wrapping the function that does it; writes the stages (JSON) to argv[1].
# detect-secrets is imported before the command starts here (a real run imports it while
# Gitleaks works), so that its import is a stage of its own.
BREAKDOWN = r"""
import json, sys, time
t0 = time.perf_counter()
T = {}
def wrap(owner, name, label):
    fn = getattr(owner, name)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            T[label] = T.get(label, 0.0) + time.perf_counter() - start
    setattr(owner, name, timed)
def count(owner, name, label):
    fn = getattr(owner, name)
    def counted(*args, **kwargs):
        T[label] = T.get(label, 0) + 1
        return fn(*args, **kwargs)
    setattr(owner, name, counted)
from gatekeeper.cli.main import main
import gatekeeper.cli.scan
from gatekeeper.gates import secrets
from gatekeeper.scan import cache, combined, gitleaks, policy
T["imports (the command's own)"] = time.perf_counter() - t0
t = time.perf_counter()
from gatekeeper.scan import detect_secrets
T["detect-secrets import (overlaps Gitleaks)"] = time.perf_counter() - t
wrap(secrets, "_policy", "policy (oms.toml at HEAD, validated)")
wrap(cache.ScanCache, "open", "scan cache open")
wrap(gitleaks.Gitleaks, "start", "gitleaks start (pieces, digest, spawn)")
wrap(detect_secrets.DetectSecrets, "scan_by_item", "detect-secrets scan (prefilter+plugins)")
wrap(gitleaks.GitleaksRun, "finish_by_item", "gitleaks wait after detect-secrets")
wrap(policy, "merged", "merge")  # with the scan-result cache
wrap(combined, "merged", "merge")  # without it
wrap(secrets.SecretsScan, "to_json", "findings to JSON")
count(gitleaks.Gitleaks, "_spawn", "gitleaks processes started")
t = time.perf_counter()
try:
    main(["scan", "--stdin", "--json"])
except SystemExit:
    pass
T["the command, in all"] = time.perf_counter() - t
T["process, in all"] = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    json.dump(T, fh)
"""


def breakdown(data: bytes, repo: Path) -> dict[str, float | int]:
    """One run of `oms scan --stdin --json`, its stages timed (see BREAKDOWN)."""
    with tempfile.TemporaryDirectory(prefix="oms-bench-brk-") as tmp:
        out = Path(tmp) / "stages.json"
        proc = subprocess.run(
            [sys.executable, "-c", BREAKDOWN, str(out)], input=data, capture_output=True,
            cwd=repo, check=False, timeout=TIMEOUT_S, env=scan_env(repo),
        )  # fmt: skip
        if not out.exists():
            raise SystemExit(f"breakdown failed: {proc.stderr.decode()[-2000:]}")
        stages: dict[str, float | int] = json.loads(out.read_text())
    return stages


def small_figure(runs: int) -> None:
    """`oms scan --stdin` of a small clean change beside `gitleaks stdin` on the same bytes:
    what every small scan (a hook's Write, a pre-commit of one file) pays beyond Gitleaks'
    own start. Printed only; the table's scan row is the 1 MB one."""
    bare, cli = [], []
    with tempfile.TemporaryDirectory(prefix="oms-bench-small-") as tmp:
        repo = a_repository(Path(tmp))
        for _ in range(runs):
            new = fresh(SMALL)
            bare.append(timed(partial(gitleaks_stdin_as_oms_configures_it, new, Path(tmp)), 1)[0])
            cli.append(timed(partial(oms_scan_stdin, new, repo, code=0), 1)[0])
    med = statistics.median
    print(f"CLI to CLI on {len(SMALL)} bytes, medians of {runs} interleaved runs:")
    print(f"  gitleaks stdin (oms' config):        {med(bare):5.2f} s [{min(bare):.2f}]")
    print(f"  oms scan --stdin --json (whole run): {med(cli):5.2f} s [{min(cli):.2f}]"
          f"   = {med(cli) / med(bare):.2f}x of medians")  # fmt: skip


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
    where_is = [(it.path, n) for it in items for n, _ in it.lines]  # each stdin line's origin
    small_figure(runs + 1 if quick else 7)
    cli_figure(data, runs if quick else 7, where_is, planted)
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
