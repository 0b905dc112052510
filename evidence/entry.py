"""One evidence log entry: its fields and its canonical line."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from .canonical import ENTRY_KEYS, ZERO_HASH, canonical, line_hash, parse_canonical

__all__ = [
    "ENTRY_KEYS",
    "ENTRY_VERSION",
    "GENESIS_KIND",
    "MAX_LINE_BYTES",
    "ZERO_HASH",
    "Entry",
    "Genesis",
    "Subject",
    "canonical",
    "line_hash",
    "parse_canonical",
]

ENTRY_VERSION = 1
MAX_LINE_BYTES = 64 * 1024

GENESIS_KIND = "genesis"

Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class Subject(BaseModel):
    """What an entry is about, in in-toto ResourceDescriptor shape (name + digests)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: Annotated[str, Field(min_length=1, max_length=1024)]
    digest: dict[str, Annotated[str, Field(min_length=1, max_length=256)]]


class Entry(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    v: int = ENTRY_VERSION
    seq: Annotated[int, Field(ge=0)]
    prev: Hex64
    time: str
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
    subject: list[Subject]
    data: dict[str, Any]
    blobs: list[Hex64]
    policy: str | None

    def line(self) -> bytes:
        return canonical(self.model_dump(mode="json"))


class Genesis(BaseModel):
    """The data of entry 0: the log is bound to one repository from its first entry.

    `common_dir` is the real path of the repository's git common dir at `oms init`
    (None only for stores made through the library without a repository).
    """

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    v: int = 1
    repo_id: Annotated[str, Field(min_length=1, max_length=256)]
    common_dir: str | None
