"""Typed evidence payloads: one pydantic model per entry kind, versioned, strict.

An entry's `data` is written from a Payload and read back through one, so that no
caller ever reads evidence by substring or by loose dict keys. Payload models live
with the code that writes them (the result gate's in `gatekeeper/gates/result/`, the
transfer gate's in `gatekeeper/gates/transfer/`); evidence itself knows only `note`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .entry import Entry
from .errors import TamperDetected

P = TypeVar("P", bound="Payload")


class Payload(BaseModel):
    """The data of one entry kind. `KIND` names the kind; `v` is the payload's version."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    KIND: ClassVar[str] = ""
    v: int = 1

    def data(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def of(cls: type[P], entry: Entry) -> P:
        """The payload of `entry`; TamperDetected when it is another kind or does not fit."""
        if entry.kind != cls.KIND:
            raise TamperDetected(f"entry {entry.seq} is {entry.kind!r}, not {cls.KIND!r}",
                                 seq=entry.seq)  # fmt: skip
        try:
            return cls.model_validate(entry.data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "data"
            why = f"{where}: {first.get('msg', '')}"
            raise TamperDetected(
                f"entry {entry.seq} ({entry.kind}) does not fit its model: {why}", seq=entry.seq
            ) from None


class Attachment(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: Annotated[str, Field(max_length=4096)]
    bytes: Annotated[int, Field(ge=0)]


class Note(Payload):
    """`oms evidence note`: a human's words, and at most one attachment (a blob)."""

    KIND: ClassVar[str] = "note"
    message: Annotated[str, Field(max_length=4096)]
    attachment: Attachment | None = None
