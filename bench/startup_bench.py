"""Start-up benchmark: `oms --help` and `oms release status` beside `python3 -c pass`.

Goal (issue 11): both <= 120 ms wall, median of 20 interleaved runs. Measured two ways:
`python -m gatekeeper` and the console script's own code (`from gatekeeper.cli.main import
main; sys.exit(main())`, what pip generates), plus the venv's bare `python -c pass`, whose
difference from `python3 -c pass` is what the environment (site, the editable-install
finder) costs before oms runs at all, and an entry-point lookup through importlib.metadata
(what older setuptools scripts did) to show what such a script would add.

Measured on this machine (2 cores, load ~1, medians of 20): anchor 48.6 ms, venv
`python -c pass` 32.3 ms, `oms --help` 86.2 ms, `oms release status` 80.9 ms (console-script
form 82.9 / 79.7 ms; with an importlib.metadata lookup 110.5 ms). Before the lazy table the
same two took 420-460 ms.

    .venv/bin/python bench/startup_bench.py [--quick]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 120.0
SCRIPT = "import sys\nfrom gatekeeper.cli.main import main\nsys.exit(main())\n"
METADATA_SCRIPT = (
    "import sys\nfrom importlib.metadata import entry_points\n"
    "entry_points(group='console_scripts', name='oms')\n" + SCRIPT
)


def commands() -> dict[str, list[str]]:
    py = sys.executable
    # The interpreter behind this venv: `python3` on PATH may be a shell shim (pyenv's costs
    # about 200 ms), which would flatter every figure beside it.
    anchor = getattr(sys, "_base_executable", None) or shutil.which("python3") or py
    return {
        "python3 -c pass (anchor)": [anchor, "-c", "pass"],
        "venv python -c pass": [py, "-c", "pass"],
        "python -m gatekeeper --help": [py, "-m", "gatekeeper", "--help"],
        "python -m gatekeeper release status": [py, "-m", "gatekeeper", "release", "status"],
        "console script: oms --help": [py, "-c", SCRIPT, "--help"],
        "console script: oms release status": [py, "-c", SCRIPT, "release", "status"],
        "metadata-lookup script: oms --help": [py, "-c", METADATA_SCRIPT, "--help"],
    }


def wall_ms(argv: Sequence[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1000


def measure(runs: int) -> dict[str, list[float]]:
    """Wall times per command, interleaved so a busy moment hits every command alike."""
    # This checkout first, as the tests run it; an empty entry would add the cwd.
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    table = commands()
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(runs):
        for name, argv in table.items():
            times[name].append(wall_ms(argv, env))
    return times


def report(times: dict[str, list[float]]) -> list[str]:
    anchor = statistics.median(next(iter(times.values())))
    runs = len(next(iter(times.values())))
    lines = [f"medians of {runs} interleaved runs (min in brackets); target <= {TARGET_MS:.0f} ms"]
    for name, samples in times.items():
        med = statistics.median(samples)
        verdict = "" if "pass" in name else ("  ok" if med <= TARGET_MS else "  OVER")
        lines.append(
            f"{name:<38} {med:6.1f} ms [{min(samples):6.1f}]  {med / anchor:4.2f}x anchor{verdict}"
        )
    return lines


def main() -> int:
    runs = 5 if "--quick" in sys.argv else 20
    for line in report(measure(runs)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
