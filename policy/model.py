"""The policy file `oms.toml`: pydantic v2 models, unknown keys rejected at every level.

Every model is frozen and forbids extra keys, so a misspelt key is an error and
never a silently ignored setting. Defaults are the built-in strict policy.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import date
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policy.pins import DEFAULT_GITLEAKS_SHA256

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Environment names that usually carry credentials never enter a sandbox.
_SECRET_ENV = re.compile(
    r"(TOKEN|SECRET|PASSW|PASSWD|CREDENTIAL|API_?KEY|PRIVATE|AUTH|SESSION|COOKIE)", re.I
)
_SHA256_HEX = r"^[0-9a-f]{64}$"

Name = Annotated[str, Field(pattern=_NAME)]
# The runners whose own reporting flags oms adds to a check's argv (`report = "pytest"`).
REPORT_SHORTHANDS = ("pytest", "node-test", "go-test", "unittest")


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True, strict=True)


class Check(_Model):
    """One step of the verification plan, run in order inside the sandbox."""

    name: Name
    cmd: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096)]], Field(min_length=1)]
    timeout_s: Annotated[int, Field(ge=1, le=86_400)] = 600
    # A `[[toolchains]]` name: its bin/ comes first on this check's PATH, bound read-only.
    toolchain: Name | None = None
    # How its runner reports the tests it ran: "junit:PATH" (a JUnit XML file the runner
    # writes in the scratch copy) or a shorthand that adds the runner's own reporting
    # flags: "pytest", "node-test", "go-test", "unittest". Unset: the tests are not
    # inventoried, and the verdict says so.
    report: str | None = None

    @field_validator("cmd")
    @classmethod
    def _no_nul(cls, cmd: list[str]) -> list[str]:
        if any("\x00" in part for part in cmd):
            raise ValueError("argv entries must not contain NUL")
        return cmd

    @field_validator("report")
    @classmethod
    def _report(cls, report: str | None) -> str | None:
        if report is None or report in REPORT_SHORTHANDS:
            return report
        kind, sep, path = report.partition(":")
        if kind != "junit" or not sep or len(path) > 1024:
            raise ValueError(f"report must be \"junit:PATH\" or one of "
                             f"{', '.join(REPORT_SHORTHANDS)}: {report[:80]!r}")  # fmt: skip
        _repo_relative(path)
        return report


def _absolute_paths(paths: list[str]) -> list[str]:
    for path in paths:
        if not path.startswith("/") or "\x00" in path or "/../" in f"{path}/":
            raise ValueError(f"ro_paths entries must be absolute without '..': {path!r}")
    return paths


def _env_names(names: list[str]) -> list[str]:
    for name in names:
        if not _ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        if _SECRET_ENV.search(name):
            raise ValueError(f"secret-looking name may not enter the sandbox: {name}")
    return names


def _repo_relative(path: str) -> str:
    parts = path.split("/")
    if (path.startswith("/") or "\x00" in path or "\\" in path
            or any(p in ("", ".", "..") for p in parts)):  # fmt: skip
        raise ValueError(f"must be a path relative to the repository root: {path!r}")
    return path


def _absolute_program(path: str) -> str:
    if not path.startswith("/") or "\x00" in path or "/../" in f"{path}/":
        raise ValueError(f"must be an absolute path without '..': {path!r}")
    return path


ToolchainKind = Literal["python-venv", "uv", "node-npm", "command"]
_RUNTIME_FIELD = {"python-venv": "python", "uv": "python", "node-npm": "node"}


class Toolchain(_Model):
    """`[[toolchains]]`: dependencies built by `oms toolchain prepare` outside the sandbox
    from the lockfile on the trusted base, bound read-only into the checks that name it."""

    name: Name
    kind: ToolchainKind
    lock: Annotated[str, Field(min_length=1, max_length=1024)]
    python: Annotated[str, Field(min_length=2, max_length=4096)] | None = None
    node: Annotated[str, Field(min_length=2, max_length=4096)] | None = None
    # `command` only: the build, run in the check sandbox (no network) with the output
    # directory writable; the base's lockfile is in its working directory.
    cmd: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = None
    # Opt-in: building sdists (pip, uv) or running install scripts (npm) at prepare time.
    allow_build: bool = False
    auto_prepare: bool = False

    @field_validator("lock")
    @classmethod
    def _relative(cls, path: str) -> str:
        return _repo_relative(path)

    @field_validator("python", "node")
    @classmethod
    def _absolute(cls, path: str | None) -> str | None:
        return None if path is None else _absolute_program(path)

    @model_validator(mode="after")
    def _fits_kind(self) -> Toolchain:
        wanted = _RUNTIME_FIELD.get(self.kind)
        for fld in ("python", "node"):
            if getattr(self, fld) is not None and fld != wanted:
                raise ValueError(f"toolchain {self.name}: `{fld}` does not apply to {self.kind}")
        if (self.cmd is not None) != (self.kind == "command"):
            raise ValueError(f"toolchain {self.name}: `cmd` is required for kind = \"command\" "
                             "and only for it")  # fmt: skip
        if self.cmd is not None and (not self.cmd or any("\x00" in c for c in self.cmd)):
            raise ValueError(f"toolchain {self.name}: `cmd` must be a non-empty argv without NUL")
        return self

    @property
    def runtime(self) -> str | None:
        """The interpreter or runtime it is built with (python-venv, uv, node-npm)."""
        if self.kind == "node-npm":
            return self.node or "/usr/bin/node"
        if self.kind in ("python-venv", "uv"):
            return self.python or "/usr/bin/python3"
        return None


AuthKind = Literal["subscription", "api-key", "none"]
BillingKind = Literal["subscription", "usage", "none"]
_PROVIDER = r"^(command:)?[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class RolePolicy(_Model):
    """`[roles.<name>]`: who does a kind of work, on which provider and model, how it signs
    in and pays, and what it may touch. Auth and billing are declared, never inferred from
    a model name: left out, the role is refused at use (`gatekeeper.work.roles`), as is a
    provider no adapter or `[providers.<name>]` knows."""

    provider: Annotated[str, Field(pattern=_PROVIDER)]
    model: Annotated[str, Field(min_length=1, max_length=128)]
    auth: AuthKind | None = None
    billing: BillingKind | None = None
    unattended: bool = False
    transport: Literal["interactive", "exec"]
    authority: Literal["read-only", "worktree-write"] = "read-only"
    # A `billing = "usage"` role runs only when its owner said credits may be spent.
    allow_usage_billing: bool = False
    timeout_s: Annotated[int, Field(ge=1, le=86_400)] = 3600

    @field_validator("model")
    @classmethod
    def _printable(cls, model: str) -> str:
        if not model.isprintable() or model != model.strip() or model.startswith("-"):
            raise ValueError("model must be printable text, no surrounding spaces, no leading '-'")
        return model


class ProviderPolicy(_Model):
    """`[providers.<name>]`: a `command:<name>` provider. The task reaches `cmd` on stdin
    and as the read-only file `$OMS_TASK_FILE`, never as argv."""

    cmd: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096)]], Field(min_length=1)]
    # It sends repo context to an external model (so the context needs a released transfer).
    external: bool = False
    # A JSON schema for its answer, read from the default branch's commit.
    output_schema: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    # Its network under `oms agent run`: none, or the egress broker (`api`: the provider
    # keys oms holds, each request scanned, recorded and counted against `[conductor.budget]`).
    egress: Literal["none", "api"] = "none"

    @field_validator("cmd")
    @classmethod
    def _no_nul(cls, cmd: list[str]) -> list[str]:
        if any("\x00" in part for part in cmd):
            raise ValueError("argv entries must not contain NUL")
        return cmd

    @field_validator("output_schema")
    @classmethod
    def _relative(cls, path: str | None) -> str | None:
        return None if path is None else _repo_relative(path)


class _HostAccess(_Model):
    """What of the host a sandbox may see: read-only toolchain paths and environment names."""

    ro_paths: list[Annotated[str, Field(min_length=1)]] = []
    env_allow: list[str] = []

    @field_validator("ro_paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        return _absolute_paths(paths)

    @field_validator("env_allow")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        return _env_names(names)


class SandboxPolicy(_HostAccess):
    """Limits and the few host paths a check may read."""

    wall_s: Annotated[int, Field(ge=1, le=86_400)] = 3600
    cpu_s: Annotated[int, Field(ge=1, le=86_400)] = 1800
    memory_mb: Annotated[int, Field(ge=64, le=65_536)] = 4096
    max_procs: Annotated[int, Field(ge=8, le=4096)] = 512
    file_size_mb: Annotated[int, Field(ge=1, le=65_536)] = 1024
    open_files: Annotated[int, Field(ge=32, le=65_536)] = 1024
    tmpfs_mb: Annotated[int, Field(ge=1, le=65_536)] = 512
    output_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 16 << 20


class EgressPolicy(_Model):
    """`[agent.egress]`: what the broker does with a secret in a request to a provider."""

    on_secret: Literal["redact", "block"] = "redact"  # noqa: S105 # nosec B105 (an action)


class AgentPolicy(_HostAccess):
    """`[agent]`: the agent profile of `oms agent run` (read-only toolchains, limits), egress."""

    wall_s: Annotated[int, Field(ge=1, le=7 * 86_400)] = 4 * 3600
    memory_mb: Annotated[int, Field(ge=256, le=262_144)] = 8192
    max_procs: Annotated[int, Field(ge=32, le=16_384)] = 2048
    tmpfs_mb: Annotated[int, Field(ge=16, le=65_536)] = 2048
    output_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 16 << 20
    egress: EgressPolicy = EgressPolicy()


PathPattern = Annotated[str, Field(min_length=1, max_length=1024)]  # see policy/paths.py


class ScannerAllow(_Model):
    """`[[scanners.allow]]`: findings of one rule (a scanner's own name for it, e.g.
    "Hex High Entropy String" or "generic-api-key") in these paths do not block."""

    rule: Annotated[str, Field(min_length=1, max_length=200)]
    paths: Annotated[list[PathPattern], Field(min_length=1)]


class ScannersPolicy(_Model):
    gitleaks_sha256: Annotated[str, Field(pattern=_SHA256_HEX)] = DEFAULT_GITLEAKS_SHA256
    allow_fingerprints: list[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = []
    timeout_s: Annotated[int, Field(ge=1, le=3600)] = 120
    # Read from the trusted base's policy only, as all of it: findings in these paths
    # (every rule) or of an allowed rule in its paths are still scanned, shown and
    # redacted, but do not block. Left out of the digest when empty.
    exclude_paths: list[PathPattern] = []
    allow: list[ScannerAllow] = []


class ProtectedPolicy(_Model):
    paths: list[Annotated[str, Field(min_length=1, max_length=1024)]] = []


class AutopilotRule(_Model):
    """A bounded approval the owner wrote down in advance (transfer gate)."""

    name: Name
    destinations: Annotated[list[Annotated[str, Field(min_length=3)]], Field(min_length=1)]
    max_bytes: Annotated[int, Field(ge=0, le=1 << 30)]
    context: list[Literal["repo", "diff", "paths", "none"]] = ["none"]
    require_clean_pushed: bool = True


class TransferPolicy(_Model):
    approval_ttl_s: Annotated[int, Field(ge=30, le=86_400)] = 900
    manifest_ttl_s: Annotated[int, Field(ge=30, le=86_400)] = 3600
    max_file_bytes: Annotated[int, Field(ge=1, le=1 << 30)] = 1 << 20
    max_total_bytes: Annotated[int, Field(ge=1, le=1 << 32)] = 16 << 20
    autopilot: list[AutopilotRule] = []


class WorkPolicy(_Model):
    """`[work]`: the orchestration limits (attempts per ticket, lease length, the grader)."""

    max_attempts: Annotated[int, Field(ge=1, le=20)] = 3
    lease_ttl_s: Annotated[int, Field(ge=30, le=86_400)] = 1800
    grader: Name = "grader"
    reflection_bytes: Annotated[int, Field(ge=256, le=65_536)] = 4096


class RunsPolicy(_Model):
    """`[runs]`: how far runs go on their own. The fan-out cap can be lowered, never raised
    past 8; `autopilot = ["plan"]` lets an implement run's plan gate pass without a human
    (transfer gates have their own `[[transfer.autopilot]]` rules)."""

    fanout_max_items: Annotated[int, Field(ge=1, le=8)] = 8
    max_cycles: Annotated[int, Field(ge=1, le=50)] = 8
    max_steps_per_cycle: Annotated[int, Field(ge=1, le=50)] = 10
    autopilot: list[Literal["plan"]] = []


Label = Annotated[str, Field(min_length=1, max_length=50)]
GoalRef = Annotated[str, Field(pattern=r"^g-[0-9a-f]{12}$")]
MAX_GOAL_LABELS = 50


Budget = Annotated[int, Field(ge=1, le=10**12)] | None


class BudgetPolicy(_Model):
    """`[conductor.budget]`: what a worker's model traffic may spend, counted by the egress
    broker across every attempt: requests and provider-reported tokens (input + output),
    per ticket and per goal. A key left out is no bound."""

    ticket_requests: Budget = None
    ticket_tokens: Budget = None
    goal_requests: Budget = None
    goal_tokens: Budget = None


class ConductorPolicy(_Model):
    """`[conductor]`: who conducts, who advises, where verified tickets are delivered, and
    the schedule's clocks. Delivery happens only when `remote` is set: a non-force push of
    `<branch_prefix><ticket>` and a draft PR on `github_repo` (default: the remote's)."""

    role: Name = "conductor"  # the interactive conductor (default Claude Code)
    advisor: Name = "advisor"  # Codex exec, read-only, schema-validated advice
    remote: Name | None = None
    github_repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")] | None = None
    branch_prefix: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9/_-]{0,40}$")] = "oms/"
    ready_label: Label = "oms:ready"
    sync_interval_s: Annotated[int, Field(ge=30, le=3600)] = 60
    watchdog_interval_s: Annotated[int, Field(ge=60, le=86400)] = 900
    stall_after_s: Annotated[int, Field(ge=60, le=86400)] = 1800
    # `oms events sync github`: a deadline on each GitHub answer and on the whole sync
    github_answer_timeout_s: Annotated[int, Field(ge=1, le=600)] = 60
    github_sync_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 600
    # A ready issue with one of these labels joins that goal (one a human made) instead of
    # the standing goal: only this map, read at the trusted mark, ever names a goal for an
    # issue; nothing an issue says does.
    goal_labels: Annotated[dict[Label, GoalRef], Field(max_length=MAX_GOAL_LABELS)] = {}
    budget: BudgetPolicy = BudgetPolicy()


class McpPolicy(_Model):
    """`[mcp]`: which tools `oms mcp` serves when it is not told (`--tools`): the gatekeeper's
    eleven (`"gatekeeper"`, the default) or every tool, runs and orchestration too (`"all"`)."""

    tools: Literal["gatekeeper", "all"] = "gatekeeper"


RunsLaterKind = Literal[
    "npm-lifecycle", "npmrc", "yarnrc", "workspace-tasks", "tool-versions", "wrapper-url",
    "python-build", "make-target",
]  # fmt: skip
# Classes of test weakening the base's policy may accept for every candidate.
WeakeningClass = Literal[
    "removed-tests", "disabled-tests", "changed-tests", "weakened-assertions", "test-config",
    "moved-tests",
]  # fmt: skip
_GLOB = Annotated[str, Field(min_length=1, max_length=1024)]


class VerifyPolicy(_Model):
    """`[verify]`: what the result gate compares beyond the plan's exit codes. The base's
    versions of `trusted_tests` files the candidate changed are run against its code;
    `allow` accepts a class of test weakening for every candidate; `runs_later` names more
    paths whose change runs outside the sandbox later (each blocks), and
    `allow_runs_later` accepts built-in kinds (a protected path is never among them)."""

    trusted_tests: list[_GLOB] = []
    allow: list[WeakeningClass] = []
    runs_later: list[_GLOB] = []
    allow_runs_later: list[RunsLaterKind] = []


SIGNER_KEY_PREFIX = "ed25519:"
SIGNER_KEY_BYTES = 32
MAX_SIGNERS = 64
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


def signer_key_text(raw: bytes) -> str:
    """A raw Ed25519 public key in the policy's form: `ed25519:` and standard base64 (44
    characters, padded), never hex, so it cannot be taken for a key id (SHA-256 hex)."""
    if len(raw) != SIGNER_KEY_BYTES:
        raise ValueError(f"an Ed25519 public key is {SIGNER_KEY_BYTES} bytes, not {len(raw)}")
    return SIGNER_KEY_PREFIX + base64.b64encode(raw).decode("ascii")


def signer_key_bytes(text: str) -> bytes:
    """The 32 raw bytes of an `ed25519:<base64>` key; only the one canonical spelling of
    each key is taken, so two entries naming one key are always seen as duplicates."""
    body = text.removeprefix(SIGNER_KEY_PREFIX)
    try:
        raw = base64.b64decode(body, validate=True) if body != text else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != SIGNER_KEY_BYTES or signer_key_text(raw) != text:
        raise ValueError(f'key must be "{SIGNER_KEY_PREFIX}" and the standard base64 of a '
                         f"{SIGNER_KEY_BYTES}-byte raw Ed25519 public key (as `oms evidence key` "
                         f"prints it): {text[:60]!r}")  # fmt: skip
    return raw


def _day(value: object) -> object:
    # A TOML date (2026-06-30) or the string "2026-06-30"; a date-time is not a day.
    if type(value) is str and _DATE.match(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    if type(value) is date:
        return value
    raise ValueError(f"must be a date, YYYY-MM-DD: {str(value)[:40]!r}")


class Signer(_Model):
    """`[trust] signers` entry: a key whose attestations the verifier accepts, from the
    start of `not_before` to the end of `not_after` (UTC days, both optional). Removing the
    entry revokes the key; rotation is a new entry whose window starts as the old one ends."""

    name: Name
    key: Annotated[str, Field(max_length=128)]
    not_before: date | None = None
    not_after: date | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        signer_key_bytes(key)
        return key

    @field_validator("not_before", "not_after", mode="before")
    @classmethod
    def _dates(cls, value: object) -> object:
        return None if value is None else _day(value)

    @model_validator(mode="after")
    def _window(self) -> Signer:
        if self.not_before and self.not_after and self.not_after < self.not_before:
            raise ValueError(f"signer {self.name}: not_after {self.not_after} is before "
                             f"not_before {self.not_before}")  # fmt: skip
        return self

    @property
    def public_raw(self) -> bytes:
        return signer_key_bytes(self.key)


class TrustPolicy(_Model):
    """`[trust]`: who may sign a verdict that travels with the commit (`signers`), and
    whether the verifier also asks that the commit came from a contained `oms agent run`."""

    signers: Annotated[list[Signer], Field(max_length=MAX_SIGNERS)] = []
    require_contained: bool = False

    @field_validator("signers")
    @classmethod
    def _unique(cls, signers: list[Signer]) -> list[Signer]:
        for i, s in enumerate(signers):
            for other in signers[:i]:
                if s.name == other.name:
                    raise ValueError(f"signer name {s.name} is listed twice")
                if s.key == other.key:
                    raise ValueError(f"signers {other.name} and {s.name} name the same key")
        return signers


MAX_COSIGNERS = 16
DEFAULT_COSIGN_GRACE = 1000


def _loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


class Cosigner(_Model):
    """`[[evidence.cosigners]]`: a C2SP tlog-witness that cosigns this log's checkpoints.
    `url` is its submission prefix (https; http only on a loopback host), `key` its
    signed-note verifier key, `<name>+<hex key id>+<base64(0x04 || Ed25519 key)>`."""

    name: Name
    url: Annotated[str, Field(max_length=512)]
    key: Annotated[str, Field(max_length=256)]

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme == "https" or (parts.scheme == "http" and _loopback(host)):
            if host and not parts.query and not parts.fragment and not parts.username:
                return url
        raise ValueError(f"cosigner url must be https:// (http:// only on a loopback host), "
                         f"with no query or credentials: {url[:80]!r}")  # fmt: skip

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        from evidence.cosign import CosignerKey, CosignError

        try:
            CosignerKey.parse(key)
        except CosignError as exc:
            raise ValueError(f"cosigner key: {exc}") from None
        return key


class EvidencePolicy(_Model):
    """`[evidence]`: the cosigners asked to cosign the log's checkpoints, how many must have
    (`required`), and by how many entries the log may outgrow the last required
    cosignature before `oms doctor` says not ready (`grace`)."""

    cosigners: Annotated[list[Cosigner], Field(max_length=MAX_COSIGNERS)] = []
    required: Annotated[int, Field(ge=0)] = 0
    grace: Annotated[int, Field(ge=0, le=1_000_000)] = DEFAULT_COSIGN_GRACE

    @model_validator(mode="after")
    def _consistent(self) -> EvidencePolicy:
        if self.required > len(self.cosigners):
            raise ValueError(f"evidence.required = {self.required} but only "
                             f"{len(self.cosigners)} cosigner(s) are listed")  # fmt: skip
        names = [c.name for c in self.cosigners]
        if len(names) != len(set(names)):
            raise ValueError("cosigner names must be unique")
        return self


class Policy(_Model):
    """The whole of `oms.toml`. `version = 1` is required in a file."""

    version: Literal[1]
    checks: list[Check] = []
    sandbox: SandboxPolicy = SandboxPolicy()
    scanners: ScannersPolicy = ScannersPolicy()
    protected: ProtectedPolicy = ProtectedPolicy()
    transfer: TransferPolicy = TransferPolicy()
    agent: AgentPolicy = AgentPolicy()
    roles: dict[Name, RolePolicy] = {}
    providers: dict[Name, ProviderPolicy] = {}
    toolchains: list[Toolchain] = []
    work: WorkPolicy = WorkPolicy()
    runs: RunsPolicy = RunsPolicy()
    conductor: ConductorPolicy = ConductorPolicy()
    verify: VerifyPolicy = VerifyPolicy()
    mcp: McpPolicy = McpPolicy()
    trust: TrustPolicy = TrustPolicy()
    evidence: EvidencePolicy = EvidencePolicy()

    @field_validator("version", mode="before")
    @classmethod
    def _integer_version(cls, v: object) -> object:
        # Literal[1] would also take `true` and `1.0`; the version is an integer.
        if type(v) is not int:
            raise ValueError("version must be the integer 1")
        return v

    @field_validator("checks")
    @classmethod
    def _unique_names(cls, checks: list[Check]) -> list[Check]:
        names = [c.name for c in checks]
        if len(names) != len(set(names)):
            raise ValueError("check names must be unique")
        return checks

    @field_validator("toolchains")
    @classmethod
    def _unique_toolchains(cls, toolchains: list[Toolchain]) -> list[Toolchain]:
        names = [t.name for t in toolchains]
        if len(names) != len(set(names)):
            raise ValueError("toolchain names must be unique")
        return toolchains

    @model_validator(mode="after")
    def _known_toolchains(self) -> Policy:
        names = {t.name for t in self.toolchains}
        for check in self.checks:
            if check.toolchain is not None and check.toolchain not in names:
                raise ValueError(f"check {check.name} names toolchain {check.toolchain!r}, "
                                 "which no [[toolchains]] entry defines")  # fmt: skip
        return self

    def toolchain(self, name: str) -> Toolchain:
        return next(t for t in self.toolchains if t.name == name)


DEFAULT_POLICY = Policy(version=1)
