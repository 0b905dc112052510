"""Transfer gate benchmark: a 10,000-file / ~100 MB repository sent with `--context repo`.

Figures, each beside its anchor:

(a) manifest building: in-process `gatekeeper.gates.transfer.preview.preview`, with the
    scanners' own time (`preview.scan_with_policy`, wrapped) reported apart, and the rest split
    into selection (list + read: `choose`) and blob storage (`BlobStore.put`, on a second
    thread while the manifest is built and signed: what the preview waited for is apart);
(b) the anchor: `git ls-files -z | xargs -0 sha256sum` over the same files (warm cache);
    goal: preview minus scanner time <= 1.5x the anchor;
(b') a second preview of the same repository, scanners included: the scan-result cache is
    warm for every file by then (where there is one; without it the scanners run again);
    goal: <= 2x the anchor;
(c) release: approval by an autopilot rule in the committed policy, then `release.release`
    (re-list, re-read and re-hash every byte, build the payload), against the same anchor.

Usage: python bench/transfer_bench.py [--files N] [--kb K] [--keep] [--quick]
"""

from __future__ import annotations

import argparse
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

DEST = "bench:model"
GOAL = 1.5
WARM_GOAL = 2.0

WORDS = (
    "value config result items handler request response data count index buffer parser "
    "token stream reader writer cache session client server record schema field table "
    "query filter mapping options context message payload status error retry timeout"
).split()


def policy(total_bytes: int) -> str:
    return f"""version = 1

[scanners]
timeout_s = 3600

[transfer]
max_file_bytes = {1 << 20}
max_total_bytes = {max(total_bytes * 2, 1 << 20)}

[[transfer.autopilot]]
name = "bench"
destinations = ["{DEST}"]
max_bytes = {1 << 30}
context = ["repo"]
require_clean_pushed = true
"""


def code_line(rng: random.Random, i: int) -> str:
    a, b, c = rng.sample(WORDS, 3)
    kind = i % 6
    if kind == 0:
        return f"def {a}_{b}_{i}(self, {c}, {b}=None):"
    if kind == 1:
        return f'    """Return the {a} {b} for the given {c}."""'
    if kind == 2:
        return f"    {a} = self.{b}.get({c!r}, {rng.randint(0, 9999)})"
    if kind == 3:
        return f"    # {a} {b} {c}: keep this in step with the {c} table"
    if kind == 4:
        return f"    if {a} is None or len({b}) > {rng.randint(1, 512)}:"
    return f"        return {a} + {b} * {rng.randint(0, 9)}"


def make_file(rng: random.Random, target: int) -> str:
    lines, size, i = ["from __future__ import annotations", ""], 0, 0
    while size < target:
        line = code_line(rng, i)
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip()[:400]}")
    return proc.stdout


def build_repo(root: Path, files: int, kb: int) -> tuple[Path, int]:
    rng = random.Random(20261129)
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    run([*git, "init", "-q", "-b", "main"], repo)
    total = 0
    for i in range(files):
        sub = repo / f"pkg{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        text = make_file(rng, kb * 1024 - 200 + rng.randint(0, 400))
        (sub / f"mod{i:05d}.py").write_text(text)
        total += len(text)
    (repo / "oms.toml").write_text(policy(total))
    run([*git, "add", "-A"], repo)
    run([*git, "commit", "-q", "-m", "bench corpus"], repo)
    origin = root / "origin.git"
    run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], root)
    run([*git, "remote", "add", "origin", str(origin)], repo)
    run([*git, "push", "-q", "-u", "origin", "main"], repo)
    return repo, total


def anchor(repo: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run(["bash", "-c", "git ls-files -z | xargs -0 sha256sum > /dev/null"], repo)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class Timer:
    """Wraps a callable and adds up the wall time spent inside it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.total, self.calls = fn, 0.0, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.total += time.perf_counter() - t
            self.calls += 1


def replace(owner: object, name: str, value: object) -> None:
    setattr(owner, name, value)


def wrap(owner: object, name: str) -> Timer:
    """Replace `owner.name` by a Timer around it (a method keeps its `self`)."""
    timer = Timer(getattr(owner, name))
    if isinstance(owner, type):

        def method(self: object, *args: Any, **kwargs: Any) -> Any:
            return timer(self, *args, **kwargs)

        replace(owner, name, method)
    else:
        replace(owner, name, timer)
    return timer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--kb", type=int, default=10, help="approximate size of each file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--quick", action="store_true", help="2,000 files (as bench/run.py --quick)")
    args = ap.parse_args()
    if args.quick:
        args.files = min(args.files, 2000)

    root = Path(tempfile.mkdtemp(prefix="oms-transfer-bench-"))
    os.environ["OMS_HOME"] = str(root / "oms-home")
    os.environ["HOME"] = str(root)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
    from evidence.blobs import BlobStore
    from gatekeeper.errors import Blocked
    from gatekeeper.gates import records
    from gatekeeper.gates.transfer import approve, pack, preview, release, unchanged

    try:
        t = time.perf_counter()
        repo, total = build_repo(root, args.files, args.kb)
        print(
            f"corpus: {args.files} files, {total / 1e6:.1f} MB of Python-like text, "
            f"committed and pushed ({time.perf_counter() - t:.1f} s to build); "
            f"{os.cpu_count()} CPUs"
        )
        records.init(repo)

        anchor_t = anchor(repo, 3)  # also warms the page cache for the preview
        print(f"anchor  git ls-files -z | xargs -0 sha256sum (median of 3): {anchor_t:.2f} s")

        scan = wrap(preview, "scan_with_policy")
        select = wrap(preview, "choose")
        replace(unchanged, "choose", select)  # the re-selection at approve and release
        put = wrap(BlobStore, "put")
        put_wait = wrap(pack.PayloadPut, "stored")

        def no_terminal(summary: list[str]) -> dict[str, Any]:
            raise Blocked("the benchmark never asks a human")

        replace(approve, "confirm_at_terminal", no_terminal)

        t = time.perf_counter()
        res = preview.preview(repo, DEST, "benchmark", "repo", [], None, False).to_json()
        preview_t = time.perf_counter() - t
        m = res["manifest"]
        if res["status"] != "previewed" or m["totals"]["items"] != args.files + 1:
            print(
                f"unexpected preview: {res['status']} {m['block_reasons']} "
                f"items={m['totals']['items']} findings={m['totals']['findings']}"
            )
            return 1
        rest = preview_t - scan.total
        ratio = rest / anchor_t
        print(
            f"(a) preview --context repo: {preview_t:.2f} s total, "
            f"{m['totals']['items']} items, {m['totals']['bytes'] / 1e6:.1f} MB"
        )
        print(f"    scanners (scan_with_policy, {scan.calls} call): {scan.total:.2f} s")
        print(
            f"    preview minus scanners:  {rest:.2f} s = {ratio:.2f}x the anchor"
            f"   goal <= {GOAL}x  {'OK' if ratio <= GOAL else 'MISSED'}"
        )
        print(f"      selection (list + read): {select.total:.2f} s")
        print(
            f"      blob storage ({put.calls} puts): {put.total:.2f} s on a second thread, "
            f"{put_wait.total:.2f} s of it waited for"
        )
        print(f"      other (hash, sign, record): {rest - select.total - put_wait.total:.2f} s")

        cold_scan = scan.total
        t = time.perf_counter()
        warm = preview.preview(repo, DEST, "benchmark", "repo", [], None, False).to_json()
        warm_t = time.perf_counter() - t
        if warm["status"] != "previewed":
            print(f"unexpected warm preview: {warm['status']} {warm['manifest']['block_reasons']}")
            return 1
        warm_ratio = warm_t / anchor_t
        print(
            f"(b') warm preview, scanners included: {warm_t:.2f} s = {warm_ratio:.2f}x the anchor"
            f"   goal <= {WARM_GOAL}x  {'OK' if warm_ratio <= WARM_GOAL else 'MISSED'}"
        )
        print(f"      of which scanners: {scan.total - cold_scan:.2f} s")

        digest = res["digest"]
        code = res["approval_packet"]["copyable_text_block"].split()[-1]
        t = time.perf_counter()
        ok = approve.approve(repo, digest, code).to_json()
        approve_t = time.perf_counter() - t
        print(f"    approve: {ok['approver']['name']} in {approve_t * 1000:.0f} ms")

        select.total = 0.0
        t = time.perf_counter()
        released, payload = release.release(repo, digest, None)
        out = released.to_json()
        release_t = time.perf_counter() - t
        print(
            f"(c) release (re-list, re-read, re-hash, payload): {release_t:.2f} s = "
            f"{release_t / anchor_t:.2f}x the anchor; payload {len(payload) / 1e6:.1f} MB"
        )
        print(f"      of which selection (list + read): {select.total:.2f} s")
        if out["status"] != "released":
            return 1
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
