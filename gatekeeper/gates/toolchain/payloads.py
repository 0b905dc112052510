"""The record of a prepared toolchain (`$OMS_HOME/toolchains/<id>.json`) and its evidence
entry (`toolchain.prepare`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from evidence import Payload


class ToolchainBuild(BaseModel):
    """What a toolchain was built from and into: the part shared by record and entry."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    id: str  # the toolchain digest: "sha256:<hex>" over kind, runtime, inputs, options
    name: str
    kind: str
    lock: str
    inputs: dict[str, str]  # repo-relative path -> "sha256:<hex>" of its bytes at the base
    runtime: str  # real path
    runtime_version: str
    allow_build: bool  # sdists built / install scripts run: third-party code ran at prepare
    dir: str
    tree_digest: str
    files: int
    bytes: int


class ToolchainRecord(ToolchainBuild):
    """`$OMS_HOME/toolchains/<hex>.json`: what `verify` and every gate compare the tree with."""

    v: int = 1
    prepared_at: str  # RFC 3339, UTC
    bin_dirs: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]
    binds: tuple[str, ...]  # host paths bound read-only besides `dir` (the runtime prefix)


class ToolchainPrepared(Payload):
    """`toolchain.prepare`: one toolchain built (never written when nothing was built)."""

    KIND: ClassVar[str] = "toolchain.prepare"
    build: ToolchainBuild
    policy_commit: str
    duration_ms: int
