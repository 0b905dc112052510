"""`make demo`: oms end to end on a sample repository it creates in a temporary folder.

Everything happens under one temporary directory (the sample repository and its own
OMS_HOME), so the demo never touches your real state. Each step prints the command
and what it answered; the demo exits non-zero if any step answers other than expected.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

OMS = [sys.executable, "-m", "gatekeeper"]


class Demo:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.repo = work / "sample-repo"
        self.env = {**os.environ, "OMS_HOME": str(work / "oms-home")}
        self.failures = 0

    def sh(self, *argv: str, cwd: Path | None = None) -> None:
        subprocess.run(argv, cwd=cwd or self.repo, check=True, env=self.env, capture_output=True)

    def oms(self, *args: str, expect: int = 0, show: bool = True) -> dict[str, object]:
        argv = [*args, "--json"]
        print(f"\n$ oms {shlex.join(argv)}")
        proc = subprocess.run(
            [*OMS, *argv], cwd=self.repo, env=self.env, capture_output=True, text=True
        )
        out = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if show:
            text = json.dumps(out, indent=2)
            print(text if len(text) < 1800 else text[:1800] + "\n  …")
        mark = "ok" if proc.returncode == expect else "UNEXPECTED"
        print(f"  -> exit {proc.returncode} (expected {expect}) {mark}")
        if proc.returncode != expect:
            self.failures += 1
            print(proc.stderr, file=sys.stderr)
        return out

    def title(self, text: str) -> None:
        print(f"\n=== {text} ===")


def make_sample_repo(d: Demo) -> None:
    d.repo.mkdir()
    d.sh("git", "init", "-q", "-b", "main")
    d.sh("git", "config", "user.email", "demo@example.invalid")
    d.sh("git", "config", "user.name", "oms demo")
    d.sh("git", "config", "commit.gpgsign", "false")
    (d.repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (d.repo / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", "sample project")


def evidence_demo(d: Demo) -> None:
    d.title("1. initialise oms for the repository (state root, key, log, checkpoint)")
    init = d.oms("init")
    d.title("2. append human notes to the evidence log")
    d.oms("evidence", "note", "-m", "started reviewing the agent's work")
    (d.work / "review.txt").write_text("looked at calc.py; fine\n")
    d.oms("evidence", "note", "-m", "review notes attached", "--attach", str(d.work / "review.txt"))
    d.title("3. audit: chain, Merkle root, signed checkpoint and witness")
    d.oms("evidence", "audit")
    d.oms("evidence", "prove", "1", show=False)
    d.title("4. flip one byte of the log and audit again: the tampering is caught")
    log = Path(d.env["OMS_HOME"]) / "repos" / str(init["repo_id"]) / "evidence" / "log.jsonl"
    data = bytearray(log.read_bytes())
    where = data.index(b"started")
    data[where] ^= 0x20  # 's' -> 'S'
    log.write_bytes(bytes(data))
    print(f"  (changed byte {where} of {log.name}: 'started' -> 'Started')")
    d.oms("evidence", "audit", expect=3)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="oms-demo-") as tmp:
        d = Demo(Path(tmp))
        make_sample_repo(d)
        evidence_demo(d)
        print()
        if d.failures:
            print(f"demo: {d.failures} step(s) did not answer as expected", file=sys.stderr)
            return 1
        print("demo: every step answered as expected")
        return 0


if __name__ == "__main__":
    sys.exit(main())
