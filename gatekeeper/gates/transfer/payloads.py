"""The transfer gate's evidence payloads: one model per entry kind, versioned, strict.

Written with `Draft.of` and read back only through `store.payloads(Model)`: an entry of
one of these kinds that does not fit its model (an unknown key, a digest in another
spelling, a missing field) is TamperDetected, never skipped.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator

from evidence import Payload
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import UsageError
from gatekeeper.gates.transfer import clock

Hex32 = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Stamp = Annotated[str, Field(pattern=clock.PATTERN)]


def _stored_digest(value: object) -> Sha256Digest:
    """Only the one form oms writes: any other spelling of a digest does not fit."""
    if isinstance(value, Sha256Digest):
        return value
    if not isinstance(value, str):
        raise ValueError("a digest is a string")  # pydantic turns ValueError into a misfit
    try:
        digest = Sha256Digest.parse(value)
    except UsageError:
        raise ValueError("not a sha256: digest") from None
    if str(digest) != value:
        raise ValueError("a digest in another spelling than the one oms stores")
    return digest


Digest = Annotated[
    Sha256Digest, PlainValidator(_stored_digest), PlainSerializer(str, return_type=str)
]


def subject_of(digest: Sha256Digest) -> list[dict[str, Any]]:
    """The entry subject naming a manifest (in-toto ResourceDescriptor shape)."""
    return [{"name": "transfer-manifest", "digest": {"sha256": digest.hex}}]


class PreviewRecord(Payload):
    """`transfer.preview`. The worktree is recorded here, not in the manifest (which
    leaves): it is how a copied approval command finds the repository from anywhere."""

    KIND: ClassVar[str] = "transfer.preview"
    digest: Digest
    worktree: str
    blocked: bool
    destination: str
    bytes: int
    items: int
    autopilot_rule: str | None


class _Approver(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class HumanApprover(_Approver):
    kind: Literal["human"] = "human"
    name: str
    uid: int


class PolicyApprover(_Approver):
    kind: Literal["policy"] = "policy"
    name: str  # "policy:<rule>"


Approver = Annotated[HumanApprover | PolicyApprover, Field(discriminator="kind")]


class ApprovalRecord(Payload):
    """`transfer.approve`: one approval of one manifest, single use, expiring."""

    KIND: ClassVar[str] = "transfer.approve"
    digest: Digest
    approval_id: Hex32
    approver: Approver
    time: Stamp
    expires: Stamp


class ReleaseRecord(Payload):
    """`transfer.release`: the approval it spent and the payload it wrote."""

    KIND: ClassVar[str] = "transfer.release"
    digest: Digest
    approval_id: Hex32
    payload_sha256: Hex64
    bytes: int
    out: Literal["stdout", "file"]


def shown(record: Payload) -> dict[str, Any]:
    """A record as `oms transfer show` prints it: the entry's data as before versioning."""
    return record.model_dump(mode="json", exclude={"v"})
