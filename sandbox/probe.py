"""A real probe: start the check profile and verify from inside that it holds.

From inside, it reads: the network interfaces (only `lo`), the environment
(only allowed names), /proc/self/limits (the limits set), the capability sets
(all zero), whether new user namespaces can be made (they must not), and
whether host paths that must stay hidden are visible (they must not be), and
whether the root file system takes a new file (it must not).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .bwrap import Bwrap
from .errors import SandboxUnavailable
from .profile import Profile
from .runner import remove_dir, run

# Our own constant script (no untrusted text): prints sections the parser checks.
_SCRIPT = r"""
echo "@net"; cat /proc/net/dev
echo "@env"; env
echo "@limits"; cat /proc/self/limits
echo "@caps"; grep '^Cap' /proc/self/status
echo "@userns"
if ! command -v unshare >/dev/null; then echo untested
elif unshare -U true 2>/dev/null; then echo allowed; else echo denied; fi
echo "@hidden"; for p in "$@"; do if [ -e "$p" ]; then echo "visible $p"; fi; done
echo "@rootfs"; if (: > /.oms-probe) 2>/dev/null; then echo writable; else echo readonly; fi
echo "@end"
"""

_LIMIT_ROWS = {
    "Max processes": "max_procs",
    "Max address space": "memory_mb",
    "Max file size": "file_size_mb",
    "Max open files": "open_files",
    "Max cpu time": "cpu_s",
}


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    failures: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def sections(text: str) -> dict[str, list[str]]:
    """A probe script's output by section: a line `@name` (no space) starts section `name`.
    The agent profile's probe speaks the same format."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@") and " " not in line:
            current = line[1:]
            out[current] = []
        elif current:
            out[current].append(line)
    return out


def interfaces_failure(net: list[str]) -> str | None:
    """From the `/proc/net/dev` section: why the network is not loopback only (None: it is)."""
    ifaces = [ln.split(":")[0].strip() for ln in net[2:] if ":" in ln]
    return None if ifaces == ["lo"] else f"network interfaces visible: {ifaces}"


def check_output(text: str, profile: Profile, hidden: Sequence[str]) -> list[str]:
    """The reasons the probe output shows the sandbox not holding (empty: it holds)."""
    s = sections(text)
    if "end" not in s:
        return ["the probe did not finish"]
    failures = []
    net = interfaces_failure(s.get("net", []))
    if net:
        failures.append(net)
    allowed = {name for name, _ in profile.env} | {"PWD", "SHLVL", "_", "OLDPWD"}
    names = {ln.split("=", 1)[0] for ln in s.get("env", []) if "=" in ln}
    if names - allowed:
        failures.append(f"environment not clear: {sorted(names - allowed)}")
    mb = 1024 * 1024
    want = {
        "max_procs": profile.limits.max_procs,
        "memory_mb": profile.limits.memory_mb * mb,
        "file_size_mb": profile.limits.file_size_mb * mb,
        "open_files": profile.limits.open_files,
        "cpu_s": profile.limits.cpu_s,
    }
    seen = {}
    for ln in s.get("limits", []):
        for row, key in _LIMIT_ROWS.items():
            if ln.startswith(row):
                parts = ln[len(row) :].split()
                seen[key] = parts[0] if parts else ""
    for key, value in want.items():
        if seen.get(key) != str(value):
            failures.append(f"limit {key} is {seen.get(key)!r}, expected {value}")
    for ln in s.get("caps", []):
        cap_name, _, mask = ln.partition(":")
        if int(mask.strip() or "0", 16) != 0:
            failures.append(f"capabilities held: {cap_name}")
    # Without unshare(1) inside, --disable-userns (a required flag) is relied on.
    if s.get("userns") not in (["denied"], ["untested"]):
        failures.append("new user namespaces can be created inside")
    failures.extend(f"host path {ln[8:]} is visible" for ln in s.get("hidden", []))
    if s.get("rootfs") != ["readonly"]:
        failures.append("the root file system is writable")
    return failures


def not_bind_parents(hidden: Sequence[str], profile: Profile) -> list[str]:
    """`hidden` without the parents of the profile's binds, read-only or read-write (e.g.
    /root above a toolchain in /root/.cache): bwrap makes those as empty directories on
    the way to the bind; their contents stay hidden."""
    inside = [p for _, p in (*profile.ro_paths, *profile.rw_paths)]
    return [h for h in hidden if not any(b.startswith(h.rstrip("/") + "/") for b in inside)]


def probe(profile: Profile, bw: Bwrap, hidden: Sequence[str]) -> ProbeResult:
    """Run the probe; ProbeResult.ok only if every check holds."""
    hidden = not_bind_parents(hidden, profile)
    scratch = Path(tempfile.mkdtemp(prefix=f"oms-probe-{os.getpid()}-"))
    try:
        try:
            result = run(profile, scratch, ["/bin/sh", "-c", _SCRIPT, "probe", *hidden], bw=bw)
        finally:
            remove_dir(scratch)
    except SandboxUnavailable as exc:
        return ProbeResult(ok=False, failures=[str(exc)])
    text = result.stdout.kept.decode("utf-8", "replace")
    failures = check_output(text, profile, hidden)
    if result.timed_out:
        failures.insert(0, "the probe timed out")
    elif result.exit_code != 0:
        err = result.stderr.display().strip().splitlines()
        failures.insert(0, f"bwrap failed (exit {result.exit_code}): {err[-1] if err else ''}")
    return ProbeResult(ok=not failures, failures=failures, duration_s=result.duration_s)
