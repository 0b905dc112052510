"""Run every benchmark: `make bench` (or `python bench/run.py [--quick] [--suite] [--rows]`).

Each bench prints its own figures beside their anchors. The rows of issue 33's table (what a
user waits for, each a ratio to an anchor measured in the same run) are recorded through
`bench/rows.py` and printed together at the end. The suite row is `make test`'s wall time:
with `--suite` this command runs `make test` itself; without it, the row is read from the
last `make test` of this checkout (`.cache/make-test.json`), and says so. `--rows` runs only
the benches behind that table (a few minutes instead of every bench).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rows import record, table

BENCHES = [
    "startup_bench.py",
    "first_hour_bench.py",
    "evidence_bench.py",
    "sandbox_bench.py",
    "gate_bench.py",
    "scan_bench.py",
    "fp_bench.py",
    "transfer_bench.py",
    "mcp_bench.py",
    "agent_bench.py",
    "toolchain_bench.py",
    "work_bench.py",
    "runs_bench.py",
    "events_bench.py",
    "loop_bench.py",
    "verify_bench.py",
]
# The benches that record a row of issue 33's table (through rows.record).
ROW_BENCHES = {"startup_bench.py", "first_hour_bench.py", "scan_bench.py", "agent_bench.py",
               "work_bench.py", "loop_bench.py"}  # fmt: skip
ROOT = Path(__file__).resolve().parent.parent
SUITE_GOAL_MIN = 13.0
SUITE_BUDGET_MIN = 15.0


def suite_row(run_it: bool) -> None:
    """`make test`'s wall time beside the 15-minute budget; goal <= 13 min on a quiet machine."""
    stamp = ROOT / ".cache" / "make-test.json"
    if run_it:
        started = time.monotonic()
        proc = subprocess.run(["make", "test"], cwd=ROOT, check=False)
        minutes = (time.monotonic() - started) / 60
        when = "measured now, lint included"
        if proc.returncode:
            print(f"make test failed (exit {proc.returncode}): the suite row is not a pass")
    else:
        try:
            last = json.loads(stamp.read_text())
            minutes = (float(last["finished"]) - float(last["started"])) / 60
        except (OSError, ValueError, KeyError, TypeError):
            print("make test: no run recorded on this checkout (`make test`, or --suite)")
            return
        at = datetime.fromtimestamp(float(last["finished"]), UTC)
        when = f"the last `make test` here, lint included, {at:%Y-%m-%d %H:%M} UTC"
        proc = None
    ok = minutes <= SUITE_GOAL_MIN and (proc is None or proc.returncode == 0)
    record("`make test` (" + when + ")", f"{minutes:.1f} min",
           f"the {SUITE_BUDGET_MIN:g}-minute budget", minutes / SUITE_BUDGET_MIN,
           f"<= {SUITE_GOAL_MIN:g} min quiet", ok)  # fmt: skip


def main() -> int:
    here = Path(__file__).parent
    suite = "--suite" in sys.argv[1:]
    only_rows = "--rows" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a not in ("--suite", "--rows")]
    code = 0
    with tempfile.TemporaryDirectory(prefix="oms-bench-rows-") as tmp:
        rows = os.path.join(tmp, "rows.jsonl")
        os.environ["OMS_BENCH_ROWS"] = rows
        for name in BENCHES:
            if not (here / name).exists() or (only_rows and name not in ROW_BENCHES):
                continue
            print(f"## {name}", flush=True)
            sys.argv = [name, *args]
            try:
                runpy.run_path(str(here / name), run_name="__main__")
            except SystemExit as exc:
                if exc.code:
                    print(f"{name} exited {exc.code}")
                    code = code or int(exc.code)
        suite_row(run_it=suite)
        print("\n## issue 33: what a user waits for, ratios from this run")
        for line in table(rows):
            print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
