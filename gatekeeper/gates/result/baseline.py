"""The base's test inventory: the same plan run once on the base commit, recorded, cached.

What ran on the base is what the candidate's inventory is compared with, so it comes
from the same checks, sandbox profile and toolchains as the candidate's run, on the
trusted base commit. It is run once per (base commit, plan digest, profile digest,
toolchain ids) and recorded as a `result.baseline` entry whose blob holds the
inventory. The cache under `$OMS_HOME` is only a pointer to that entry: a pointer that
is missing, unreadable, or names an entry or blob that does not match is a miss, and
the base runs again; a doubtful baseline is never read as "no tests on the base".
A base check that declared a report and left none cannot be compared with:
Unavailable, naming the check.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import rfc8785
from pydantic import BaseModel, ConfigDict, Field

from evidence import Draft, EvidenceError, Payload
from gatekeeper.errors import Unavailable
from gatekeeper.gates.result.inventory import Outcome, TestCase
from gatekeeper.gates.result.reported import run_reported
from gatekeeper.gates.result.state import GateState

BASELINE_DIR = "baselines"
MAX_POINTER_BYTES = 4096


class BaselineCheck(BaseModel):
    """One check's run on the base: how it ended and how many tests had each outcome."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: str
    report: str
    exit_code: int | None
    timed_out: bool
    counts: dict[str, int]


class ResultBaseline(Payload):
    """`result.baseline`: the plan run on the base commit for its test inventory."""

    KIND: ClassVar[str] = "result.baseline"
    repo_id: str
    base: str
    plan_digest: str
    profile_digest: str
    toolchains: tuple[str, ...]
    key: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    checks: tuple[BaselineCheck, ...]
    inventory: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # blob: canonical JSON


Inventory = Mapping[str, tuple[TestCase, ...]]


@dataclass(frozen=True)
class Baseline:
    """The base's inventory per reporting check, and the entry that records it."""

    seq: int
    cached: bool
    key: str
    inventory: Inventory


def counts(cases: Sequence[TestCase]) -> dict[str, int]:
    out = {o.value: 0 for o in Outcome}
    for c in cases:
        out[c.outcome.value] += 1
    return out


def baseline_key(s: GateState) -> str:
    """What makes two base runs the same: base commit, plan, profile, toolchain ids."""
    assert s.profile is not None  # SandboxReady made it
    doc = {"base": s.base, "plan": s.loaded.plan_digest, "profile": s.profile.digest,
           "toolchains": _toolchain_ids(s)}  # fmt: skip
    return hashlib.sha256(rfc8785.dumps(doc)).hexdigest()


def _toolchain_ids(s: GateState) -> list[str]:
    return sorted(t.used.id for t in (s.toolchains or {}).values())


def _encode(inventory: Inventory) -> bytes:
    doc = {name: [[c.id, c.file, c.outcome.value] for c in cases]
           for name, cases in inventory.items()}  # fmt: skip
    return rfc8785.dumps(doc)


def _decode(data: bytes) -> dict[str, tuple[TestCase, ...]]:
    doc = json.loads(data)
    return {name: tuple(TestCase(i, f, Outcome(o)) for i, f, o in rows)
            for name, rows in doc.items()}  # fmt: skip


def _pointer(s: GateState, key: str) -> Path:
    return s.store.dir.parent / BASELINE_DIR / f"{key}.json"


def _cached(s: GateState, key: str) -> Baseline | None:
    """The recorded baseline the pointer names, when every part of it checks out."""
    try:
        fd = os.open(_pointer(s, key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            seq = int(json.loads(fh.read(MAX_POINTER_BYTES))["seq"])
        entry = s.store.entry(seq)
        payload = ResultBaseline.of(entry)
        if payload.key != key or payload.inventory not in entry.blobs:
            return None
        inventory = _decode(s.store.blobs.get(payload.inventory))
        if set(inventory) != {c.name for c in payload.checks}:
            return None
        return Baseline(seq, True, key, inventory)
    except (OSError, ValueError, KeyError, TypeError, EvidenceError):
        return None


def _remember(s: GateState, key: str, seq: int) -> None:
    """Write the pointer atomically; a pointer that cannot be written costs a re-run only."""
    path = _pointer(s, key)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(json.dumps({"seq": seq}).encode())
        os.replace(tmp, path)
    except OSError:
        return


def baseline(s: GateState) -> Baseline:
    """The base's inventory for every check that declares a report: cached, or run now and
    recorded as a `result.baseline` entry."""
    key = baseline_key(s)
    found = _cached(s, key)
    if found is not None:
        return found
    say = s.progress or (lambda _line: None)
    inventory: dict[str, tuple[TestCase, ...]] = {}
    rows = []
    for check in s.loaded.policy.checks:
        if check.report is None:
            continue
        say(f"baseline {check.name}: running on the base {s.base[:12]}")
        run = run_reported(s, check, s.base)
        if run.cases is None:
            raise Unavailable(
                f"the base's run of check {check.name} gives no test inventory "
                f"({run.error}); the plan's report does not work on the base"
            )
        inventory[check.name] = run.cases
        r = run.result
        rows.append(BaselineCheck(name=check.name, report=check.report, exit_code=r.exit_code,
                                  timed_out=r.timed_out, counts=counts(run.cases)))  # fmt: skip
    blob = s.store.blobs.put(_encode(inventory))
    assert s.profile is not None
    payload = ResultBaseline(repo_id=s.repo.repo_id, base=s.base,
                             plan_digest=s.loaded.plan_digest, profile_digest=s.profile.digest,
                             toolchains=tuple(_toolchain_ids(s)), key=key, checks=tuple(rows),
                             inventory=blob)  # fmt: skip
    subject = [{"name": f"git+file://{s.repo.top}", "digest": {"gitCommit": s.base}}]
    entry = s.store.append(Draft.of(payload, subject=subject, blobs=[blob],
                                    policy=s.loaded.digest))  # fmt: skip
    s.clock.lap("evidence")
    _remember(s, key, entry.seq)
    return Baseline(entry.seq, False, key, inventory)
