"""`make demo`: oms end to end on a sample repository it creates in a temporary folder.

Everything happens under one temporary directory (the sample repository and its own
OMS_HOME), so the demo never touches your real state. Each step prints the command
and what it answered; the demo exits non-zero if any step answers other than expected.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shlex
import string
import subprocess
import sys
import tempfile
from pathlib import Path

OMS = [sys.executable, "-m", "gatekeeper"]


class Demo:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.repo = work / "sample-repo"
        self.env = {**os.environ, "OMS_HOME": str(work / "oms-home"),
                    "OMS_WORK_DIR": str(work / "agent-work")}  # fmt: skip
        self.failures = 0

    def sh(self, *argv: str, cwd: Path | None = None) -> None:
        subprocess.run(argv, cwd=cwd or self.repo, check=True, env=self.env, capture_output=True)

    def oms(
        self, *args: str, expect: int = 0, show: bool = True, keys: tuple[str, ...] = ()
    ) -> dict[str, object]:
        # `--json` before a `--`: after it, it would be CMD's own argument.
        cut = args.index("--") if "--" in args else len(args)
        argv = [*args[:cut], "--json", *args[cut:]]
        print(f"\n$ oms {shlex.join(argv)}")
        proc = subprocess.run(
            [*OMS, *argv], cwd=self.repo, env=self.env, capture_output=True, text=True
        )
        out = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if show:
            shown = {k: out.get(k) for k in keys} if keys else out
            text = json.dumps(shown, indent=2)
            print(text if len(text) < 1800 else text[:1800] + "\n  …")
        mark = "ok" if proc.returncode == expect else "UNEXPECTED"
        print(f"  -> exit {proc.returncode} (expected {expect}) {mark}")
        if proc.returncode != expect:
            self.failures += 1
            print(proc.stderr, file=sys.stderr)
        return out

    def title(self, text: str) -> None:
        print(f"\n=== {text} ===")


POLICY = """version = 1

[[checks]]
name = "unit"
cmd = ["/usr/bin/python3", "-m", "unittest", "-q"]
timeout_s = 60

[[transfer.autopilot]]
name = "small-docs"
destinations = ["anthropic:claude-sonnet"]
max_bytes = 65536
context = ["paths"]
require_clean_pushed = true
"""
TESTS = """import unittest

from calc import add


class TestCalc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""


VERDICT = ("decision", "reasons", "commit", "evidence_seq")


def fake_cloud_key() -> str:
    # Built at run time so that no scanner finds a key in this file.
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + "234567") for _ in range(16))


def make_sample_repo(d: Demo) -> None:
    d.repo.mkdir()
    d.sh("git", "init", "-q", "-b", "main")
    d.sh("git", "config", "user.email", "demo@example.invalid")
    d.sh("git", "config", "user.name", "oms demo")
    d.sh("git", "config", "commit.gpgsign", "false")
    (d.repo / "oms.toml").write_text(POLICY)
    (d.repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (d.repo / "test_calc.py").write_text(TESTS)
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", "sample project")
    # A local bare repository as origin, so the demo can show a clean-pushed state.
    origin = d.work / "origin.git"
    d.sh("git", "init", "-q", "--bare", str(origin))
    d.sh("git", "remote", "add", "origin", str(origin))
    d.sh("git", "push", "-q", "-u", "origin", "main")


def candidate(d: Demo, branch: str, files: dict[str, str], message: str) -> None:
    """An agent-like commit on its own branch from main."""
    d.sh("git", "checkout", "-q", "-b", branch, "main")
    for name, text in files.items():
        (d.repo / name).write_text(text)
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", message)
    d.sh("git", "checkout", "-q", "main")


def result_gate_demo(d: Demo) -> int:
    d.title("3. four agent-like candidates through the result gate (policy from main)")
    mul = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    candidate(d, "agent/passes", {"calc.py": mul}, "add mul")
    key = fake_cloud_key()
    candidate(d, "agent/leaks-key", {"settings.py": f'AWS_KEY = "{key}"\n'}, "add settings")
    weak = POLICY.replace('["/usr/bin/python3", "-m", "unittest", "-q"]', '["true"]')
    candidate(d, "agent/edits-policy", {"oms.toml": weak}, "speed up CI")
    candidate(d, "agent/breaks-test", {"calc.py": "def add(a, b):\n    return a - b\n"}, "refactor")

    def gate(branch: str, expect: int) -> dict[str, object]:
        args = ("process-result", "--candidate", branch, "--base", "main")
        return d.oms(*args, expect=expect, keys=VERDICT)

    ready = gate("agent/passes", 0)
    gate("agent/leaks-key", 3)
    gate("agent/edits-policy", 3)
    gate("agent/breaks-test", 1)
    seq = ready.get("evidence_seq")
    return seq if isinstance(seq, int) else -1


# What the contained "agent" does: its edit, then three things it must not be able to do.
AGENT_SCRIPT = """echo agent: start
printf 'def add(a, b):\\n    return a + b\\n\\n\\ndef sub(a, b):\\n    return a - b\\n' > calc.py
test -e "$1" && echo "agent: I can read oms state" || echo "agent: oms state is not here"
oms transfer approve sha256:0000000000000000000000000000000000000000000000000000000000000000 \\
  --code 000000 >/dev/null 2>&1; echo "agent: oms transfer approve exited $?"
echo agent: end
"""


def agent_demo(d: Demo) -> None:
    d.title("4. an agent contained by `oms agent run`: its own clone, no authority, no network")
    state = d.env["OMS_HOME"]
    out = d.oms("agent", "run", "--egress", "none", "--", "/bin/sh", "-c", AGENT_SCRIPT,
                "agent", state, keys=("run_id", "exit_code", "stdout", "base", "candidate",
                                      "candidate_ref", "evidence_seq"))  # fmt: skip
    ref = out.get("candidate_ref")
    if not isinstance(ref, str) or "oms state is not here" not in str(out.get("stdout")):
        d.failures += 1
        print("  the agent's edit did not come back, or it could reach oms state")
        return
    print("  (its edit came back as a run ref; the gate judges it from the recorded base)")
    d.oms("process-result", "--candidate", ref, keys=VERDICT)


def transfer_demo(d: Demo) -> None:
    d.title("5. the data boundary: what would leave for a model provider, and only that")
    notes = d.repo / "notes"
    notes.mkdir()
    key = fake_cloud_key()
    (notes / "setup.md").write_text(f"# Setup\n\nDeploy with the usual script.\nkey: {key}\n")
    d.sh("git", "add", "-A")
    d.sh("git", "commit", "-q", "-m", "setup notes")
    d.sh("git", "push", "-q", "origin", "main")
    ask = ("transfer", "preview", "--to", "anthropic:claude-sonnet", "--purpose",
           "summarise the setup notes", "--context", "paths", "--path", "notes")  # fmt: skip
    packet_keys = ("status", "digest", "approval_packet")
    d.oms(*ask, expect=3, keys=packet_keys)
    print("  (blocked: the notes hold a key; preview again with --redact)")
    out = d.oms(*ask, "--redact", keys=packet_keys)
    block = out.get("approval_packet", {})
    command = block.get("copyable_text_block", "") if isinstance(block, dict) else ""
    words = str(command).split()
    if len(words) != 6:
        d.failures += 1
        print("  no approval command in the packet")
        return
    digest, code = words[3], words[5]
    d.oms("transfer", "approve", digest, "--code", code, keys=("approver", "expires"))
    payload = d.work / "payload.out"
    d.oms("transfer", "release", digest, "--out", str(payload), keys=("status", "payload_bytes"))
    body = payload.read_text()
    leaked = key in body
    print(f"  payload: {len(body)} bytes; the key is {'PRESENT' if leaked else 'not'} in it")
    if leaked:
        d.failures += 1
    d.oms("transfer", "release", digest, "--out", str(d.work / "again.out"), expect=3,
          keys=("error",))  # fmt: skip
    print("  (a second release of the same approval is refused)")


def evidence_demo(d: Demo) -> None:
    d.title("1. initialise oms for the repository (state root, key, log, checkpoint)")
    init = d.oms("init")
    d.oms("doctor", show=False)
    d.title("2. append human notes to the evidence log")
    d.oms("evidence", "note", "-m", "started reviewing the agent's work")
    (d.work / "review.txt").write_text("looked at calc.py; fine\n")
    d.oms("evidence", "note", "-m", "review notes attached", "--attach", str(d.work / "review.txt"))
    ready_seq = result_gate_demo(d)
    agent_demo(d)
    transfer_demo(d)
    d.title("6. audit: chain, Merkle root, signed checkpoint and witness")
    d.oms("evidence", "audit")
    d.oms("evidence", "prove", "1", show=False)
    d.title("7. the passing verdict as a DSSE envelope (in-toto Statement, SLSA VSA)")
    env = d.oms("evidence", "export", str(ready_seq), "--dsse", show=False).get("envelope", {})
    if isinstance(env, dict) and "payload" in env:
        statement = json.loads(base64.b64decode(env["payload"]))
        print(json.dumps({"payloadType": env["payloadType"], "statement": statement}, indent=2))
    d.title("8. flip one byte of the log and audit again: the tampering is caught")
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
