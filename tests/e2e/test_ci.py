"""The Ubuntu CI workflow is valid and keeps AppArmor on; the smoke script passes here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def test_workflow_validates_against_the_github_workflow_schema() -> None:
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    proc = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflow_keeps_the_userns_restriction_and_loads_the_bwrap_profile() -> None:
    text = WORKFLOW.read_text()
    assert "runs-on: ubuntu-24.04" in text
    assert "kernel.apparmor_restrict_unprivileged_userns=1" in text
    assert "apparmor_restrict_unprivileged_userns=0" not in text
    assert "apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict" in text
    assert "aa-status --enforced" in text
    assert "ci/smoke.py" in text
    assert "make test" in text


def test_a_broken_workflow_is_rejected_by_the_validator(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\non: push\njobs:\n  t:\n    runs-on: ubuntu-24.04\n    stepz: []\n")
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    proc = subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(bad)], capture_output=True
    )
    assert proc.returncode != 0


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs /usr/bin/bwrap")
def test_smoke_script_passes_on_this_machine() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "smoke.py")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "smoke: ok" in proc.stdout


def test_the_demo_answers_as_expected_at_every_step(tmp_path: Path) -> None:
    """`make demo` end to end (its own temporary OMS_HOME, work dir and sample repository,
    from a fresh HOME): every step must answer as the demo expects, the contained agent's
    step and the approval at a pseudo-terminal included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMS_", "GIT_", "XDG_"))}
    env["HOME"] = str(tmp_path)  # the system temp dir stays: the sandbox uid must reach it
    proc = subprocess.run([sys.executable, str(ROOT / "ci" / "demo.py")], capture_output=True,
                          text=True, env=env, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "demo: every step answered as expected" in proc.stdout
    assert "agent: oms state is not here" in proc.stdout
    assert "oms transfer approve exited 4" in proc.stdout
    # What a user sees: the human verdicts and the approval prompt typed at a terminal,
    # not --json dumps or the demo's own bookkeeping.
    assert "READY_FOR_HUMAN: " in proc.stdout and "BLOCKED: " in proc.stdout
    assert "Approve this transfer? Type 'yes' to approve: yes" in proc.stdout
    assert "-> exit" not in proc.stdout and '"oms_exit_code"' not in proc.stdout
