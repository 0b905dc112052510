"""Running one external tool for a toolchain build or a runtime probe, bounded.

An argv list (never a shell), a working directory oms made, a time-out that kills the
tool's whole process group, umask 022 (the tree must be readable by the sandbox uid),
output kept in anonymous files of which only the last few KB are read back. A failure
is ToolchainUnavailable naming the toolchain and the tool's last meaningful line.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess  # nosec B404 (argv lists only, never a shell)
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .tree import ToolchainUnavailable

PROBE_TIMEOUT_S = 30
INSTALL_TIMEOUT_S = 1800
TAIL_BYTES = 4096
MESSAGE_CHARS = 300
# Lines that end a tool's output without saying what went wrong.
_NOISE = re.compile(r"A complete log of this run|^npm (error|ERR!)\s*$|^hint:|^note:", re.I)
_ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)")
# uv marks its errors with U+00D7.
_ERROR = re.compile(r"^(npm (error|ERR!) |error[:\s]|ERROR:|\u00d7|fatal:)", re.I)


@dataclass(frozen=True)
class ToolOutput:
    stdout: str  # the last TAIL_BYTES, decoded with replacement
    stderr: str


def _tail(f: IO[bytes]) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - TAIL_BYTES))
    return f.read().decode("utf-8", "replace")


def printable(line: str) -> str:
    """Only printable characters (no terminal control, no bidi overrides), collapsed."""
    kept = "".join(c if c.isprintable() else " " for c in _ANSI.sub("", line))
    return " ".join(kept.split())


def last_line(text: str) -> str:
    """The line a user should see: the last error line, else the last non-noise line."""
    lines = [printable(raw) for raw in text.splitlines()]
    lines = [ln for ln in lines if ln and not _NOISE.search(ln)]
    errors = [ln for ln in lines if _ERROR.match(ln)]
    chosen = (errors or lines or ["no output"])[-1]
    if len(chosen) > MESSAGE_CHARS:
        chosen = chosen[: MESSAGE_CHARS - 1] + "…"
    return chosen


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_tool(
    name: str,
    what: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: int,
) -> ToolOutput:
    """Run `argv` for toolchain `name`; ToolchainUnavailable unless it exits 0 in time.

    `what` names the step in the message: "toolchain py: pip install failed (exit 1): …".
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(  # nosec B603 (argv list from oms, no shell)
                list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True, umask=0o022,
            )  # fmt: skip
        except OSError as exc:
            raise ToolchainUnavailable(
                f"toolchain {name}: cannot run {argv[0]}: {exc.strerror or exc}"
            ) from None
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise ToolchainUnavailable(
                f"toolchain {name}: {what} timed out after {timeout_s} s"
            ) from None
        finally:
            if proc.returncode is None:  # interrupted: never leave the tool running
                _stop(proc)
        result = ToolOutput(_tail(out), _tail(err))
    if code != 0:
        line = last_line(result.stderr) if result.stderr.strip() else last_line(result.stdout)
        status = f"exit {code}" if code > 0 else f"signal {-code}"
        raise ToolchainUnavailable(f"toolchain {name}: {what} failed ({status}): {line}")
    return result
