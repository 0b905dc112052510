"""CI smoke test: the probe passes, one check runs sandboxed, one escape is blocked.

Runs on a machine as it is (GitHub's Ubuntu 24.04 with AppArmor, or here) and
exits non-zero with one line per problem. Uses a throwaway repository and OMS_HOME.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OMS = [sys.executable, "-m", "gatekeeper"]


def oms(env: dict[str, str], repo: Path, *args: str) -> tuple[int, dict[str, object]]:
    # --json goes before `--`: after it, every word belongs to the sandboxed command.
    cut = args.index("--") if "--" in args else len(args)
    argv = [*OMS, *args[:cut], "--json", *args[cut:]]
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, json.loads(proc.stdout or "{}")


def main() -> int:
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="oms-smoke-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        env = {**os.environ, "OMS_HOME": str(Path(tmp) / "home")}
        # A plan on the default branch: without one the doctor says not ready.
        (repo / "oms.toml").write_text('version = 1\n\n[[checks]]\nname = "unit"\ncmd = ["true"]\n')
        for argv in (
            ["git", "init", "-q"],
            ["git", "add", "oms.toml"],
            ["git", "-c", "user.name=s", "-c", "user.email=s@example.invalid",
             "commit", "-q", "-m", "smoke"],
        ):  # fmt: skip
            subprocess.run(argv, cwd=repo, check=True, env=env)
        oms(env, repo, "init")
        code, doc = oms(env, repo, "doctor")
        probe = doc.get("probe", {})
        print(f"doctor: exit {code}, probe {probe}, apparmor {doc.get('apparmor')}")
        if code != 0 or not isinstance(probe, dict) or not probe.get("ok"):
            problems.append(f"probe failed: {probe}; remedies {doc.get('remedies')}")
        code, run = oms(env, repo, "sandbox", "run", "--", "/bin/sh", "-c", "echo sandboxed")
        print(f"sandboxed check: exit {code}, stdout {run.get('stdout')!r}")
        if code != 0 or run.get("stdout") != "sandboxed\n":
            problems.append(f"sandboxed check did not run: {run}")
        key = Path(env["OMS_HOME"]) / "keys" / "ed25519.pem"
        code, run = oms(env, repo, "sandbox", "run", "--", "/bin/cat", str(key))
        print(f"escape attempt (read the signing key): exit {code}")
        if code == 0 or "PRIVATE KEY" in str(run.get("stdout")):
            problems.append("the signing key was readable from inside the sandbox")
    for p in problems:
        print(f"smoke: {p}", file=sys.stderr)
    print("smoke: ok" if not problems else "smoke: FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
