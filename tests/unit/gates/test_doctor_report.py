"""The `Doctor` report model: `to_json()` is exactly the `oms doctor --json` of before.

Pinned against literals (keys, values and their order), so a renamed field, a section
that turns up as null instead of being absent, or a lost warning fails here.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from gatekeeper.gates.authority import AUTHORITY_NOTE, EGRESS_MODES, Authority, Egress
from gatekeeper.gates.doctor import (
    KERNEL_MEMORY_WARNING,
    Apparmor,
    BwrapFound,
    BwrapMissing,
    Doctor,
    EvidenceAudit,
    EvidenceUninitialised,
    EvidenceUnverified,
    GitleaksOk,
    KernelMemory,
    KeyOk,
    PolicyDefaults,
    PolicyRead,
    Probe,
    ProbeNotRun,
    RepositoryFound,
    Unusable,
)

AUTHORITY = Authority(key_readable=True, inside_agent_sandbox=False, run_id=None)
EGRESS = Egress(on_secret="redact", modes=dict(EGRESS_MODES))
APPARMOR = Apparmor(restrict_unprivileged_userns="1", bwrap_userns_restrict_loaded=True,
                    unprivileged_userns_clone=None)  # fmt: skip


def _ready() -> Doctor:
    return Doctor(
        state_root="/s",
        repository=RepositoryFound(repo_id="r1"),
        policy=PolicyRead(origin="oms.toml at abc", digest="sha256:" + "0" * 64),
        apparmor=APPARMOR,
        bwrap=BwrapFound(path="/usr/bin/bwrap", version="0.9.0", source="system"),
        probe=Probe(ok=True, failures=(), duration_s=0.25, profile_digest="sha256:p"),
        gitleaks=GitleaksOk(version="8.30.1", sha256="ab"),
        key=KeyOk(key_id="k1"),
        evidence=EvidenceAudit(intact=True, entries=3, first_bad_seq=None, reason=None),
        kernel_memory=KernelMemory(bounded=True, cgroup="v2", reason=""),
        authority=AUTHORITY,
        egress=EGRESS,
        problems=(),
        remedies=(),
    )


READY_JSON: dict[str, Any] = {
    "state_root": "/s",
    "repository": {"ok": True, "repo_id": "r1"},
    "policy": {"ok": True, "origin": "oms.toml at abc", "digest": "sha256:" + "0" * 64},
    "apparmor": {
        "restrict_unprivileged_userns": "1",
        "bwrap_userns_restrict_loaded": True,
        "unprivileged_userns_clone": None,
    },
    "bwrap": {"path": "/usr/bin/bwrap", "version": "0.9.0", "source": "system"},
    "probe": {"ok": True, "failures": [], "duration_s": 0.25, "profile_digest": "sha256:p"},
    "gitleaks": {"ok": True, "version": "8.30.1", "sha256": "ab"},
    "key": {"ok": True, "key_id": "k1"},
    "evidence": {"intact": True, "entries": 3, "first_bad_seq": None, "reason": None},
    "kernel_memory": {"bounded": True, "cgroup": "v2", "reason": ""},
    "authority": {
        "key_readable": True,
        "inside_agent_sandbox": False,
        "run_id": None,
        "note": AUTHORITY_NOTE,
    },
    "egress": {"on_secret": "redact", "modes": dict(EGRESS_MODES)},
    "problems": [],
    "remedies": [],
    "ready": True,
}


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    # json.dumps keeps key order: the output is compared byte for byte, not as a dict.
    assert json.dumps(got) == json.dumps(want)


def test_a_ready_report_gives_every_section_in_todays_order() -> None:
    report = _ready()
    assert report.ready is True
    _same(report.to_json(), READY_JSON)


def test_without_a_repository_policy_and_evidence_are_absent_not_null() -> None:
    report = Doctor(
        state_root="/s",
        repository=Unusable(error="not a git repository: /x"),
        policy=None,
        apparmor=APPARMOR,
        bwrap=BwrapMissing(error="no bwrap"),
        probe=ProbeNotRun(),
        gitleaks=Unusable(error="missing"),
        key=Unusable(error="no key"),
        evidence=None,
        kernel_memory=KernelMemory(bounded=True, cgroup="v1", reason=""),
        authority=AUTHORITY,
        egress=EGRESS,
        problems=("no such repository: not a git repository: /x",),
        remedies=("pass --repo DIR of a git repository",),
    )
    assert report.ready is False
    want = {
        "state_root": "/s",
        "repository": {"ok": False, "error": "not a git repository: /x"},
        "apparmor": READY_JSON["apparmor"],
        "bwrap": {"error": "no bwrap"},
        "probe": {"ok": False, "failures": ["not run: no usable bwrap"]},
        "gitleaks": {"ok": False, "error": "missing"},
        "key": {"ok": False, "error": "no key"},
        "kernel_memory": {"bounded": True, "cgroup": "v1", "reason": ""},
        "authority": READY_JSON["authority"],
        "egress": READY_JSON["egress"],
        "problems": ["no such repository: not a git repository: /x"],
        "remedies": ["pass --repo DIR of a git repository"],
        "ready": False,
    }
    _same(report.to_json(), want)


@pytest.mark.parametrize(
    ("section", "want"),
    [
        (EvidenceUninitialised(), {"intact": None, "initialised": False}),
        (EvidenceUnverified(error="no key to verify it with"),
         {"intact": None, "error": "no key to verify it with"}),
        (EvidenceAudit(intact=False, entries=2, first_bad_seq=1, reason="prev mismatch"),
         {"intact": False, "entries": 2, "first_bad_seq": 1, "reason": "prev mismatch"}),
        (PolicyDefaults(origin="built-in defaults (no commit yet)"),
         {"ok": True, "origin": "built-in defaults (no commit yet)"}),
    ],
)  # fmt: skip
def test_each_variant_of_a_section_keeps_its_own_keys(section: Any, want: dict[str, Any]) -> None:
    _same(section.to_json(), want)


def test_unbounded_kernel_memory_carries_the_warning_last() -> None:
    km = KernelMemory(bounded=False, cgroup=None, reason="no delegation")
    _same(km.to_json(), {"bounded": False, "cgroup": None, "reason": "no delegation",
                         "warning": KERNEL_MEMORY_WARNING})  # fmt: skip


def test_a_problem_makes_the_report_not_ready() -> None:
    report = _ready().model_copy(update={"problems": ("gitleaks unusable: x",)})
    assert report.ready is False and report.to_json()["ready"] is False


def test_the_report_is_frozen_and_rejects_unknown_fields() -> None:
    report = _ready()
    with pytest.raises(pydantic.ValidationError):
        report.state_root = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        KeyOk(key_id="k", extra="x")  # type: ignore[call-arg]
