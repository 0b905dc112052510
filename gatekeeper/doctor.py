"""`oms doctor`: is this machine ready? A real sandbox probe, AppArmor status, key, chain.

It reports; it changes nothing. Every "not ready" comes with the exact remedy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evidence import EvidenceError, EvidenceStore, audit, load_key, state_root
from policy import default_policy
from sandbox import SandboxUnavailable, find_bwrap, probe
from sandbox.cgroup import support as cgroup_support

from .errors import OmsError
from .git import open_repo, read_policy_at, resolve_commit
from .sandboxing import hidden_paths, profile_for

APPARMOR_SYSCTL = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
USERNS_SYSCTL = Path("/proc/sys/kernel/unprivileged_userns_clone")
APPARMOR_PROFILES = Path("/sys/kernel/security/apparmor/profiles")
REMEDY_APPARMOR = (
    "sudo apt-get install apparmor-profiles && "
    "sudo cp /usr/share/apparmor/extra-profiles/bwrap-userns-restrict /etc/apparmor.d/ && "
    "sudo apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict"
)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def apparmor_status() -> dict[str, Any]:
    restrict = _read(APPARMOR_SYSCTL)
    profiles = _read(APPARMOR_PROFILES)
    loaded = (
        None
        if profiles is None
        else any(line.startswith("bwrap") for line in profiles.splitlines())
    )
    return {
        "restrict_unprivileged_userns": restrict,
        "bwrap_userns_restrict_loaded": loaded,
        "unprivileged_userns_clone": _read(USERNS_SYSCTL),
    }


def kernel_memory_status() -> dict[str, Any]:
    """Whether checks get a memory cgroup (tmpfs pages, inodes, dentries capped)."""
    found = cgroup_support()
    status: dict[str, Any] = {"bounded": found.kind is not None, "cgroup": found.kind,
                              "reason": found.reason}  # fmt: skip
    if found.kind is None:
        status["warning"] = (
            "kernel memory of checks is not capped (no usable memory cgroup): files a check "
            "creates in its tmpfs mounts and /workspace can pin RAM beyond memory_mb; run oms "
            "as root on cgroup v1, or with delegated cgroup v2 memory and pids controllers"
        )
    return status


def doctor(repo_dir: Path) -> tuple[dict[str, Any], bool]:
    """(report, ready). Ready means: the sandbox probe passed and the key is usable."""
    report: dict[str, Any] = {"state_root": str(state_root())}
    remedies: list[str] = []
    repo = None
    try:
        repo = open_repo(repo_dir)
        loaded = read_policy_at(repo.top, resolve_commit(repo.top, "HEAD"))
    except OmsError:
        loaded = default_policy()
    report["apparmor"] = apparmor = apparmor_status()
    sandbox_ok = False
    try:
        bw = find_bwrap()
        report["bwrap"] = {"path": bw.path, "version": bw.version_text, "source": bw.source}
        if bw.source == "wheel":
            remedies.append("prefer the distribution's bwrap: sudo apt-get install bubblewrap")
        if repo is not None:
            profile = profile_for(repo, loaded)
            hidden = hidden_paths(repo, profile)
        else:
            from sandbox import check_profile

            profile = check_profile(loaded.policy.sandbox, never=[state_root()])
            hidden = [str(state_root()), "/root", "/run", "/etc/shadow"]
        result = probe(profile, bw, hidden)
        report["probe"] = {
            "ok": result.ok,
            "failures": result.failures,
            "duration_s": result.duration_s,
            "profile_digest": profile.digest,
        }
        sandbox_ok = result.ok
        if not result.ok:
            if (
                apparmor["restrict_unprivileged_userns"] == "1"
                and not apparmor["bwrap_userns_restrict_loaded"]
            ):
                remedies.append(REMEDY_APPARMOR)
            elif apparmor["unprivileged_userns_clone"] == "0":
                remedies.append("sudo sysctl -w kernel.unprivileged_userns_clone=1")
            else:
                remedies.append("run `oms doctor --json` and read probe.failures")
    except (SandboxUnavailable, OmsError) as exc:
        report["bwrap"] = {"error": str(exc)}
        report["probe"] = {"ok": False, "failures": ["not run: no usable bwrap"]}
        remedies.append("sudo apt-get install bubblewrap")
    key_ok = False
    try:
        key = load_key(state_root())
        report["key"] = {"ok": True, "key_id": key.key_id}
        key_ok = True
    except EvidenceError as exc:
        report["key"] = {"ok": False, "error": str(exc)}
        remedies.append("oms init --repo DIR")
    if repo is not None and key_ok:
        try:
            rep = audit(EvidenceStore.open(state_root(), repo.repo_id))
            report["evidence"] = {
                "intact": rep.intact,
                "entries": rep.entries,
                "reason": rep.reason,
            }
        except EvidenceError as exc:
            report["evidence"] = {"intact": None, "error": str(exc)}
    if repo is not None:
        try:
            import anyio

            from .mcp_server import tools_digest

            report["mcp_tools_digest"] = anyio.run(tools_digest, repo.top)[0]
        except Exception as exc:  # informational only; never a reason to be "ready"
            report["mcp_tools_digest"] = f"unavailable: {type(exc).__name__}"
    report["kernel_memory"] = kernel_memory_status()  # a warning, never "not ready"
    report["remedies"] = remedies
    ready = sandbox_ok and key_ok
    report["ready"] = ready
    return report, ready
