"""Values that are not secrets by their exact shape: hash fields and placeholder credentials.

Three detect-secrets filters, registered in `detect_secrets.py` through its settings (its
own plug point for filters), so they run inside its per-line pipeline with the line at
hand and a value they drop never becomes a finding; and one predicate for Gitleaks, only
for hash formats that name themselves (its findings are never dropped for a placeholder).
Each rule looks at the value and the key beside it, never at the file's name: a lockfile
is scanned as any other file, and a token in its `resolved` URL is still found.
docs/scanning.md lists the rules. Importing this module does not import detect-secrets.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import unquote

_B64 = "[A-Za-z0-9+/]"
# A value that names its own hash format, whole: SRI (npm, yarn, pnpm), `algo:hex`
# (poetry, uv, pip --hash, OCI digests), go.sum's `h1:`, yarn berry's `10c0/hex`.
_SELF_DESCRIBED = re.compile(
    rf"sha1-{_B64}{{27}}=|sha256-{_B64}{{43}}=|sha384-{_B64}{{64}}|sha512-{_B64}{{86}}=="
    r"|md5:[0-9a-f]{32}|sha1:[0-9a-f]{40}|sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}"
    r"|sha512:[0-9a-f]{128}"
    rf"|h1:{_B64}{{43}}="
    r"|[0-9]{1,2}c[0-9]/[0-9a-f]{128}"
)
_SELF_DESCRIBED_IN_LINE = re.compile(rf"(?<![\w+/-])(?:{_SELF_DESCRIBED.pattern})(?![\w+/=])")
_HEX_DIGEST = re.compile(r"[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}|[0-9a-f]{128}")
# A key naming a hash (`sha256`, `"digest"`, `checksum`, `file_sha1`…), then `:` or `=`,
# then the value, quoted or bare, ending there.
_HASH_KEY = re.compile(
    r"""(?:^|[^\w])(?:[A-Za-z0-9]+[_.-])*(?:sha|sha1|sha256|sha512|md5|digest|hash|checksum)"""
    r"""["']?\s*[:=]\s*["']?([0-9a-f]+)(?![\w])""",
    re.IGNORECASE,
)
_PLACEHOLDER_RULES = ("Basic Auth Credentials", "Secret Keyword")  # detect-secrets' own
# Whole values (percent-decoded, case-folded) that stand for a password in docs and examples.
_PLACEHOLDER = re.compile(
    r"(?:(?:a|an|my|your|the|some|example|dummy|fake|test)[ _-]?)?"
    r"(?:(?:client|api|app|db|database|access|admin|user|service)[ _-]?)?"
    r"(?:pass|passwd|password|pwd|secret|token|key|changeme|changeit|example|dummy"
    r"|placeholder|redacted|foo|bar|baz|qux)"
    r"|x{3,}|\*{3,}|\.{3,}|<[^<>]+>|\$\{[^{}]+\}|\{\{[^{}]+\}\}|\$[A-Za-z_][A-Za-z0-9_]*"
    r"|%\([a-z_]+\)s"
)

# Base64 of a sentence: five or more words of letters, spaces and plain punctuation.
_PROSE = re.compile(r"[A-Za-z',.!?-]+(?: [A-Za-z',.!?-]+){4,}")


def is_hash_value(secret: str) -> bool:
    """The value, whole, is a hash in a format that names itself (`sha512-…`, `sha256:…`)."""
    return _SELF_DESCRIBED.fullmatch(secret) is not None


def is_hash_field(secret: str, line: str) -> bool:
    """detect-secrets filter: a self-described hash (or the hash part of one on its line), or
    a lowercase hex digest of exactly 32, 40, 64 or 128 characters that is the whole value
    of a hash-named key on its line."""
    if is_hash_value(secret):
        return True
    if len(secret) >= 16 and any(
        m.group(0).endswith(secret) for m in _SELF_DESCRIBED_IN_LINE.finditer(line)
    ):
        return True  # the hash part of one, e.g. the hex of `--hash=sha256:…`
    if _HEX_DIGEST.fullmatch(secret) is None:
        return False
    return any(m.group(1) == secret for m in _HASH_KEY.finditer(line))


def is_placeholder_credential(secret: str, plugin: Any) -> bool:
    """detect-secrets filter: a URL password or a `password = …` value that is, whole, a
    placeholder (`pass`, `secret`, `xxx`, `****`, `<password>`, `${VAR}`…)."""
    if getattr(plugin, "secret_type", None) not in _PLACEHOLDER_RULES:
        return False
    value = unquote(secret).strip("\"'`").casefold()
    return _PLACEHOLDER.fullmatch(value) is not None


def is_encoded_prose(secret: str, plugin: Any) -> bool:
    """detect-secrets filter: a "Base64 High Entropy String" that decodes, whole, to a
    sentence of five or more words (letters and plain punctuation: no digits, no `:`), as
    docs use to show base64; a key or token is random bytes and never decodes so."""
    if getattr(plugin, "secret_type", None) != "Base64 High Entropy String":
        return False
    try:
        text = base64.b64decode(secret, validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return False
    return _PROSE.fullmatch(text) is not None
