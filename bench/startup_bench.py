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

Issue 33 adds the commands a user waits for, each as a ratio to `oms --help` measured in
the same interleaved runs, in a fresh repository after `oms init`: `oms run list` and
`oms mcp config` (goal <= 3x: nothing imported that the command does not use) and
`oms doctor` (goal <= 12x: it probes the sandbox and checks the scanners). What doctor runs
is then timed section by section in one fresh process (its module imports, each section of
gates/doctor.py, each check the layers above hand in, the MCP tools digest, which a warm
`$OMS_HOME` serves from `gatekeeper/mcp/digest_cache.py` without the MCP SDK), and the
slowest is named. The three rows go to `rows.record` for `bench/run.py`.

    .venv/bin/python bench/startup_bench.py [--quick]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rows import record

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


# Issue 33: (argv, goal as a multiple of `oms --help`), run in a repository after `oms init`.
WAITED_FOR: dict[str, tuple[list[str], float]] = {
    "oms run list": (["run", "list", "--json"], 3.0),
    "oms mcp config": (["mcp", "config", "--json"], 3.0),
    "oms doctor": (["doctor", "--json"], 12.0),
}
HELP = "oms --help"


def bench_env(root: Path) -> dict[str, str]:
    """A private HOME and state root; this checkout first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "OMS_", "XDG_"))}
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(HOME=str(root / "home"), OMS_HOME=str(root / "oms-state"),
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               PYTHONPATH=os.pathsep.join(path))  # fmt: skip
    (root / "home").mkdir()
    return env


def initialised_repo(root: Path, env: dict[str, str]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "bench@example.invalid"],
        ["config", "user.name", "bench"],
        ["commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gatekeeper", "init", "--json"], cwd=repo, env=env,
                   check=True, capture_output=True)  # fmt: skip
    return repo


def measure_waited(runs: int, repo: Path, env: dict[str, str]) -> dict[str, list[float]]:
    """Wall times, interleaved with `oms --help` so each ratio shares its moment's load."""
    table = {HELP: [sys.executable, "-m", "gatekeeper", "--help"]}
    table.update({n: [sys.executable, "-m", "gatekeeper", *a] for n, (a, _) in WAITED_FOR.items()})
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(runs):
        for name, argv in table.items():
            t = time.perf_counter()
            subprocess.run(argv, cwd=repo, env=env, capture_output=True, check=False)
            times[name].append((time.perf_counter() - t) * 1000)
    return times


def waited_report(times: dict[str, list[float]]) -> list[str]:
    anchor = statistics.median(times[HELP])
    lines = [f"issue 33: medians of {len(times[HELP])} interleaved runs, as multiples of "
             f"`{HELP}` ({anchor:.1f} ms)"]  # fmt: skip
    for name, (_, goal) in WAITED_FOR.items():
        med = statistics.median(times[name])
        verdict = "ok" if med / anchor <= goal else "OVER"
        lines.append(
            f"{name:<38} {med:7.1f} ms  {med / anchor:5.2f}x  goal <= {goal:g}x  {verdict}"
        )
    return lines


# One fresh process: each part of `oms doctor` wrapped in a timer, then the command run as
# the console script runs it. Sections are gates/doctor.py's own steps; `check:` rows are
# what cli/doctor.py hands in from the layers above.
DOCTOR_SECTIONS = r"""
import contextlib, io, json, sys, time
t0 = time.perf_counter()
import gatekeeper.cli.doctor as cli_doctor
from gatekeeper.gates import authority, doctor as gates_doctor
spent = {"import the command's modules": time.perf_counter() - t0}

def timed(name, fn):
    def run(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
    run.__name__ = getattr(fn, "__name__", name)
    return run

for attr, name in (("_repository", "repository and policy"), ("apparmor_status", "apparmor"),
                   ("_sandbox", "sandbox probe (bwrap)"), ("_gitleaks", "gitleaks pin"),
                   ("_key", "signing key"), ("_evidence", "evidence audit"),
                   ("_plan", "verification plan"), ("_toolchains", "toolchains"),
                   ("kernel_memory_status", "kernel memory")):
    setattr(gates_doctor, attr, timed(name, getattr(gates_doctor, attr)))
gates_doctor.auth.authority = timed("authority", authority.authority)
for attr in ("doctor_check", "cosign_check", "key_check", "hook_timeouts", "schedule_check"):
    fn = getattr(cli_doctor, attr)
    setattr(cli_doctor, attr, timed(f"check: {fn.__module__}", fn))
import gatekeeper.mcp.digest_cache as digest_cache  # warm after the runs above: no SDK
digest_cache.doctor_digest = timed("MCP tools digest (cache)", digest_cache.doctor_digest)
from gatekeeper.cli.main import main
t = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["doctor", "--json"])
    except SystemExit:
        pass
spent["whole command (after imports)"] = time.perf_counter() - t
spent["MCP SDK loaded"] = 1000.0 * ("mcp" in sys.modules)
print(json.dumps({k: round(v * 1000, 1) for k, v in spent.items()}))
"""


def doctor_sections(repo: Path, env: dict[str, str]) -> tuple[list[str], str]:
    """The lines, and the slowest section's name with its time."""
    proc = subprocess.run([sys.executable, "-P", "-c", DOCTOR_SECTIONS], cwd=repo, env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    spent: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    whole = spent.pop("whole command (after imports)")
    sdk = spent.pop("MCP SDK loaded") > 0
    slowest = max(spent, key=spent.__getitem__)
    lines = ["oms doctor, what it runs (one process, in-process timers; sections in order):"]
    lines += [f"  {name:<44} {ms:7.1f} ms" for name, ms in spent.items()]
    lines.append(f"  {'the command after its imports':<44} {whole:7.1f} ms")
    hit = "no (the digest cache hit)" if not sdk else "yes (a cache miss)"
    lines.append(f"  MCP SDK loaded: {hit}")
    lines.append(f"  slowest: {slowest} ({spent[slowest]:.1f} ms)")
    return lines, f"{slowest} {spent[slowest]:.0f} ms"


def record_rows(times: dict[str, list[float]], slowest: str) -> None:
    """Issue 33's rows 6-7 for `bench/run.py`: each command as a multiple of `oms --help`."""
    anchor = statistics.median(times[HELP])
    for name, (_, goal) in WAITED_FOR.items():
        med = statistics.median(times[name])
        value = f"{med:.0f} ms" + (f" (slowest part: {slowest})" if name == "oms doctor" else "")
        record(name, value, f"`{HELP}` {anchor:.0f} ms", med / anchor, f"<= {goal:g}x",
               med / anchor <= goal)  # fmt: skip


def main() -> int:
    runs = 5 if "--quick" in sys.argv else 20
    for line in report(measure(runs)):
        print(line)
    with tempfile.TemporaryDirectory(prefix="oms-startup-bench-") as tmp:
        env = bench_env(Path(tmp))
        repo = initialised_repo(Path(tmp), env)
        waited = measure_waited(max(5, runs // 2), repo, env)
        for line in waited_report(waited):
            print(line)
        lines, slowest = doctor_sections(repo, env)
        for line in lines:
            print(line)
        record_rows(waited, slowest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
