"""The transfer manifest: exactly which bytes go where and why. Versioned; unknown keys rejected.

The manifest digest is SHA-256 over its RFC 8785 canonical JSON; the manifest is
signed as a DSSE envelope and recorded in evidence; approvals name that digest.
"""

from __future__ import annotations

from typing import Annotated, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.digest import Sha256Digest

PAYLOAD_TYPE = "application/vnd.oms.transfer-manifest+json"
# The purpose leaves in full and is shown in full at the approval prompt; past this
# length `preview` refuses it (a usage error) rather than cutting it.
MAX_PURPOSE_CHARS = 20_000

Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Context = Literal["repo", "diff", "paths", "none"]


class _M(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class Visibility(_M):
    state: Literal["dirty", "unpushed", "clean-pushed", "no-upstream"]
    upstream: str | None = None


class Destination(_M):
    provider: Annotated[str, Field(min_length=1, max_length=64)]
    model: Annotated[str, Field(min_length=1, max_length=128)]
    kind: Literal["cli", "api", "browser"] = "api"


class Item(_M):
    path: str
    bytes: int
    sha256: Hex64  # of the bytes that leave
    mode: Literal["full", "diff", "redacted"]
    source_sha256: Hex64  # of the file (or diff) as read, before any redaction


class Excluded(_M):
    path: str
    reason: str


class FindingRef(_M):
    scanner: str
    rule: str
    file: str
    line: int
    fingerprint: Hex64


class Redaction(_M):
    rule: str
    path: str
    line: int


class Totals(_M):
    items: int
    bytes: int
    excluded: int
    findings: int
    redactions: int


class Manifest(_M):
    version: Literal[1] = 1
    repo_id: str
    head: str
    branch: str | None
    visibility: Visibility
    destination: Destination
    purpose: Annotated[str, Field(max_length=MAX_PURPOSE_CHARS)]
    context: Context
    paths: list[str] = []  # with context "paths": what was asked for, re-selected at release
    base: str | None = None
    items: list[Item]
    excluded: list[Excluded]
    findings: list[FindingRef]
    redactions: list[Redaction]
    totals: Totals
    blocked: bool
    block_reasons: list[str]
    payload_blob: Hex64 | None  # all item bytes, in item order, as one stored blob
    autopilot_rule: str | None
    policy_digest: str
    created: str
    expires: str
    nonce: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]

    def canonical(self) -> bytes:
        return bytes(rfc8785.dumps(self.model_dump(mode="json")))

    def digest(self) -> Sha256Digest:
        return Sha256Digest.of(self.canonical())
