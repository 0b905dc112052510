"""False-positive benchmark: findings per MB on real third-party text, Gitleaks alone vs oms.

The text: the Python sources and docs (`.py`, `.pyi`, `.md`, `.rst`, `.txt`, and each
distribution's METADATA, its README) of well-known packages as installed in the venv
that runs this, copied into one folder. Real code and docs hold no real secrets, so
every finding is a false positive. Scanned twice: by the bare Gitleaks binary
(`gitleaks dir`, its default rules) and by the whole command `oms scan DIR --json` (both
scanners, oms' config and filters). Beside it, recall on the planted corpus
(bench/corpus.py, every planted secret must still be found) and a 16-package
package-lock.json (no finding expected).

Anchors, before oms' hash-field and placeholder filters: on 4.2 MB of rich, httpx, click
and pydantic, Gitleaks 0 findings and oms 19 (14 "Basic Auth Credentials", 4 "Secret
Keyword", 1 "Base64 High Entropy String"): 4.5 per MB; the package-lock: 16 findings.
Goal: at most 0.5 findings per MB beyond Gitleaks' own, recall unchanged.

    .venv/bin/python bench/fp_bench.py [--quick]
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import make_change, package_lock

from gatekeeper.scan import ScanItem
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.gitleaks import locate
from policy import DEFAULT_GITLEAKS_SHA256

PACKAGES = ("rich", "httpx", "click", "pydantic", "jsonschema", "markdown_it", "anyio", "h11",
            "attr", "attrs", "idna", "mcp")  # fmt: skip
QUICK = PACKAGES[:4]  # the four of the anchor
SUFFIXES = {".py", ".pyi", ".md", ".rst", ".txt"}
TIMEOUT_S = 600
ANCHOR = {"mb": 4.2, "gitleaks": 0, "oms": 19, "per_mb": 4.5, "lock": 16}
GOAL_PER_MB = 0.5


def copy_texts(site: Path, names: tuple[str, ...], dest: Path) -> int:
    """Copy each package's sources and docs, and its METADATA, under `dest`; bytes copied."""
    total = 0
    for name in names:
        root = site / name
        files = [f for f in root.rglob("*") if f.is_file() and f.suffix in SUFFIXES]
        files += [d / "METADATA" for d in site.glob(f"{name}-*.dist-info")]
        for f in files:
            if f.is_symlink() or not f.is_file():
                continue
            target = dest / f.relative_to(site)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            total += target.stat().st_size
    return total


def gitleaks_alone(tree: Path, work: Path) -> list[dict[str, object]]:
    """`gitleaks dir` with its default rules: the anchor every extra finding is counted on."""
    proc = subprocess.run(
        [locate(), "dir", str(tree), "--no-banner", "--log-level", "error", "--exit-code", "42",
         "--report-format", "json", "--report-path", "-"],
        capture_output=True, cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(work)},
        check=False, timeout=TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode not in (0, 42):
        raise SystemExit(f"gitleaks dir failed: exit {proc.returncode}: {proc.stderr[:300]!r}")
    found: list[dict[str, object]] = json.loads(proc.stdout or b"[]")
    return found


def oms_scan(tree: Path, work: Path) -> dict[str, object]:
    """`oms scan DIR --json`, a new process, outside any repository (built-in policy)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "scan", str(tree), "--json"],
        capture_output=True, cwd=work, check=False, timeout=TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode not in (0, 3):
        raise SystemExit(f"oms scan: exit {proc.returncode}: {proc.stderr[:300]!r}")
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def recall() -> tuple[int, int]:
    """(found, planted) on the planted corpus, by the lines each secret spans."""
    items, planted = make_change(seed=7, target_bytes=200_000)
    findings, _ = scan_both(items, DEFAULT_GITLEAKS_SHA256, TIMEOUT_S)
    at = {(f.file, f.line) for f in findings}
    hit = [p for p in planted if any((p.path, n) in at for n in range(p.first, p.last + 1))]
    missed = [p.kind for p in planted if p not in hit]
    assert not missed, f"planted secrets not found: {missed}"
    return len(hit), len(planted)


def lockfile_findings() -> int:
    lock = package_lock(random.Random(1), packages=16)
    findings, _ = scan_both([ScanItem.whole("package-lock.json", lock)],
                            DEFAULT_GITLEAKS_SHA256, TIMEOUT_S)  # fmt: skip
    return len(findings)


def main() -> int:
    names = QUICK if "--quick" in sys.argv else PACKAGES
    site = Path(sysconfig.get_paths()["purelib"])
    with tempfile.TemporaryDirectory(prefix="oms-bench-fp-") as tmp:
        tree, work = Path(tmp) / "site-packages", Path(tmp) / "work"
        work.mkdir()
        copied = copy_texts(site, names, tree)
        gl = gitleaks_alone(tree, work)
        data = oms_scan(tree, work)
    findings = data["findings"]
    assert isinstance(findings, list)
    scanned = copied - sum(int(s["bytes"] or 0) for s in data["skipped"])  # type: ignore[attr-defined]
    mb = scanned / 1e6
    beyond = max(0, len(findings) - len(gl))
    per_mb = beyond / mb
    print(f"text: {', '.join(names)} from {site}")
    print(f"scanned: {mb:.2f} MB ({data['scanned_items']} items)   anchor {ANCHOR['mb']} MB")
    print(f"gitleaks alone (gitleaks dir, default rules): {len(gl)} findings "
          f"({len(gl) / mb:.2f}/MB)   anchor {ANCHOR['gitleaks']}")  # fmt: skip
    print(f"oms scan (both scanners): {len(findings)} findings ({len(findings) / mb:.2f}/MB)   "
          f"anchor {ANCHOR['oms']} ({ANCHOR['per_mb']}/MB)")  # fmt: skip
    print(f"beyond gitleaks' own: {per_mb:.2f}/MB   goal <= {GOAL_PER_MB}/MB   "
          f"{'MET' if per_mb <= GOAL_PER_MB else 'NOT MET'}")  # fmt: skip
    for (scanner, rule), n in sorted(Counter((f["scanner"], f["rule"]) for f in findings).items()):
        print(f"  {n:3} {rule} ({scanner})")
    for f in findings:
        print(f"      {f['file'].split('site-packages/', 1)[-1]}:{f['line']} {f['rule']}")
    found, planted = recall()
    print(f"recall on the planted corpus: {found}/{planted}   (every planted secret, as before)")
    lock = lockfile_findings()
    print(f"package-lock.json of 16 packages: {lock} findings   anchor {ANCHOR['lock']}   "
          f"goal 0   {'MET' if lock == 0 else 'NOT MET'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
