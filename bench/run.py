"""Run every benchmark: `make bench` (or `python bench/run.py [--quick]`)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

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


def main() -> int:
    here = Path(__file__).parent
    for name in BENCHES:
        if not (here / name).exists():
            continue
        print(f"## {name}")
        sys.argv = [name, *sys.argv[1:]]
        try:
            runpy.run_path(str(here / name), run_name="__main__")
        except SystemExit as exc:
            if exc.code:
                return int(exc.code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
