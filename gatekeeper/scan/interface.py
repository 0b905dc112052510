"""What every scanner takes and gives: scan items in, findings out, typed failures.

A finding never carries the secret: only the scanner, rule, file, line, a
fingerprint (SHA-256 of a fixed prefix and the secret) and a redacted preview.
"""

from __future__ import annotations

import hashlib
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from gatekeeper.errors import Unavailable

FINGERPRINT_PREFIX = b"oms-finding-v1\x00"
Decoding = Literal["surrogateescape", "replace"]  # how bytes become the text scanned


class ScannerUnavailable(Unavailable):
    """A scanner is missing, tampered, crashed or timed out: its silence means nothing."""


class ScanItem:
    """Text to scan: a file's lines (all, or the ones a change adds) with their numbers.

    A whole text is decoded and split into lines only when a scanner reads them (a cache
    hit never does). `key` names exactly what is scanned: the SHA-256 of the bytes a whole item was
    decoded from (with how), or of the text, or of the numbered lines; and the path's
    extension, the one thing of the path a scanner reads (detect-secrets picks its keyword
    patterns by it; Gitleaks is given pieces, not paths). The same bytes at another path
    with the same extension have the same findings there.
    """

    __slots__ = ("_content", "_lines", "_raw", "_text", "path")

    def __init__(self, path: str, lines: Sequence[tuple[int, str]]) -> None:
        self.path = path
        self._lines: Sequence[tuple[int, str]] | None = lines
        self._text: str | None = None
        self._raw: tuple[bytes, Decoding] | None = None  # bytes to decode on first read
        self._content: str | None = None

    @classmethod
    def whole(cls, path: str, text: str) -> ScanItem:
        """All of `text`, its lines numbered from 1 (split when first read)."""
        item = cls(path, ())
        item._lines, item._text = None, text
        return item

    @classmethod
    def of_bytes(
        cls, path: str, data: bytes, errors: Decoding = "surrogateescape", sha256: str | None = None
    ) -> ScanItem:
        """All of `data` decoded as UTF-8 with `errors`; `sha256`: the caller's hash of
        exactly `data` (hashed here when not given), so the bytes are hashed once."""
        item = cls.whole(path, "")
        item._text, item._raw = None, (data, errors)
        digest = sha256 or hashlib.sha256(data).hexdigest()
        item._content = f"bytes:utf-8/{errors}:{digest}"
        return item

    @property
    def lines(self) -> Sequence[tuple[int, str]]:
        if self._lines is None:
            self._lines = list(enumerate(self._whole().split("\n"), 1))
        return self._lines

    def _whole(self) -> str:
        if self._text is None:
            assert self._raw is not None  # whole() sets the text, of_bytes() the bytes
            data, errors = self._raw
            self._text, self._raw = data.decode("utf-8", errors), None
        return self._text

    @property
    def text(self) -> str | None:
        """The whole text, for an item made by `whole` or `of_bytes` (None: some lines)."""
        return None if self._text is None and self._raw is None else self._whole()

    @property
    def key(self) -> str:
        """SHA-256 (hex) naming exactly the content scanned and the path's extension."""
        h = hashlib.sha256(b"oms-scan-item-v2\x00")
        h.update(_encoded(posixpath.splitext(self.path)[1]) + b"\x00")
        if self._content is not None:
            h.update(self._content.encode())
        elif self._text is not None:
            h.update(b"text:" + hashlib.sha256(_encoded(self._text)).digest())
        else:
            lines = hashlib.sha256()
            for number, text in self.lines:
                data = _encoded(text)
                lines.update(b"%d %d\x00" % (number, len(data)) + data)
            h.update(b"lines:" + lines.digest())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScanItem):
            return NotImplemented
        return self.path == other.path and list(self.lines) == list(other.lines)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ScanItem({self.path!r}, <{len(self.lines)} lines>)"


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Finding:
    scanner: str
    rule: str
    file: str
    line: int
    fingerprint: str
    preview: str
    allowed: bool = field(default=False, compare=False)
    end_line: int | None = field(default=None, compare=False)  # last line of a multi-line secret

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def fingerprint(secret: str) -> str:
    """Hash of the secret (never the secret). Same value, same fingerprint, any scanner."""
    return hashlib.sha256(FINGERPRINT_PREFIX + secret.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ScannerInfo:
    name: str
    version: str
    digest: str | None  # of the binary, where there is one

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class Scanner(ABC):
    @property
    @abstractmethod
    def info(self) -> ScannerInfo: ...

    @abstractmethod
    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        """All findings in `items`; ScannerUnavailable on any scanner failure."""
