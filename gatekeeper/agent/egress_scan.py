"""What the broker does to a request body before it may leave: canaries, secrets, redaction.

Scanning must not grow with the square of a conversation (issue 12, "Egress"): a JSON
body is parsed and only its string leaves (keys and values) not yet seen in this run
are scanned, all together in one `scan_with_policy` call (one Gitleaks start-up per
request); each leaf's verdict is cached by its SHA-256, so a leaf redacted once is
redacted again when the agent resends it. A body that is not JSON (or has duplicate
keys, which a provider might read differently from us) is scanned as one text.
No secret value leaves this module: findings carry rule and fingerprint, and a redacted
text has each secret replaced by a mark naming the rule.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.scan import Finding, ScanItem, fingerprint
from gatekeeper.scan.policy import ScanReport, scan_with_policy
from policy import LoadedPolicy

REDACTED = "[oms: redacted {rule}]"
# scan/redact.py's preview(): "<prefix>…[redacted, N chars]" — N is the secret's length,
# and the prefix (for long secrets) where it starts: enough to find it by fingerprint.
_PREVIEW = re.compile(r"(?P<prefix>.*)…\[redacted, (?P<n>[0-9]+) chars\]", re.S)

Scan = Callable[[Sequence[ScanItem], LoadedPolicy], ScanReport]


@dataclass(frozen=True)
class Verdict:
    """One text's blocking findings, and the text with each of them redacted (None: clean)."""

    findings: tuple[Finding, ...]
    redacted: str | None


@dataclass(frozen=True)
class Inspection:
    """A request as the broker may forward it: its body and header values after redaction."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...]  # not allowed by policy, over every leaf
    canary: bool
    redacted: bool


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ScanCache:
    """One run's verdicts by text digest; new texts of a request are scanned in one call.

    Not thread-safe: the broker scans one request at a time."""

    def __init__(self, loaded: LoadedPolicy, scan: Scan = scan_with_policy) -> None:
        self._loaded = loaded
        self._scan = scan
        self._verdicts: dict[str, Verdict] = {}
        self.scanned_bytes = 0

    def verdicts(self, texts: Sequence[str]) -> list[Verdict]:
        keys = [digest(t) for t in texts]
        new = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._verdicts}
        if new:
            items = [ScanItem.whole(f"leaf-{k}", t) for k, t in new.items()]
            report = self._scan(items, self._loaded)  # ScannerUnavailable: nothing cached
            found: dict[str, list[Finding]] = {}
            for f in report.blocking:
                found.setdefault(f.file.removeprefix("leaf-"), []).append(f)
            for k, t in new.items():
                fs = tuple(found.get(k, ()))
                self._verdicts[k] = Verdict(fs, redact(t, fs) if fs else None)
            self.scanned_bytes += sum(len(t.encode("utf-8", "surrogatepass")) for t in new.values())
        return [self._verdicts[k] for k in keys]


def inspect(
    body: bytes, headers: Sequence[tuple[str, str]], cache: ScanCache, canaries: Sequence[str]
) -> Inspection:
    """`body` and `headers` checked for canaries, scanned (new texts only) and redacted.

    A body is re-serialised only when something in it was redacted; otherwise the bytes
    the agent sent are the bytes forwarded."""
    doc = _parse(body)
    texts = list(_leaves(doc)) if doc is not _NOT_JSON else [_as_text(body)]
    values = [v for _, v in headers]
    if _has_canary(body, [*texts, *values], canaries):
        return Inspection(body, tuple(headers), (), canary=True, redacted=False)
    unique = list(dict.fromkeys([*texts, *values]))
    verdicts = dict(zip(unique, cache.verdicts(unique), strict=True))
    replaced = {t: v.redacted for t, v in verdicts.items() if v.redacted is not None}
    findings = tuple(f for v in verdicts.values() for f in v.findings)
    if not replaced:
        return Inspection(body, tuple(headers), findings, canary=False, redacted=False)
    new_headers = tuple((k, replaced.get(v, v)) for k, v in headers)
    if doc is _NOT_JSON:
        new_body = replaced.get(texts[0], texts[0]).encode("utf-8", "surrogateescape")
    else:
        new_body = _serialise(_replace(doc, replaced))
    return Inspection(new_body, new_headers, findings, canary=False, redacted=True)


def redact(text: str, findings: Sequence[Finding]) -> str:
    """`text` with each finding's secret replaced by a mark naming its rule.

    The secret is found by its fingerprint (its length and prefix come from the
    finding's preview), in the lines the finding covers; every occurrence of it in the
    text is then replaced, longest secret first so that no part of a longer one stays.
    A secret that cannot be found that way has its whole lines replaced instead."""
    lines = text.split("\n")
    secrets: dict[str, str] = {}
    for f in findings:
        secret = _locate(lines, f)
        if secret is None:
            for n in range(f.line, max(f.line, f.end_line or f.line) + 1):
                if 0 < n <= len(lines):
                    lines[n - 1] = REDACTED.format(rule=f.rule)
        else:
            secrets.setdefault(secret, REDACTED.format(rule=f.rule))
    out = "\n".join(lines)
    for secret in sorted(secrets, key=len, reverse=True):
        out = out.replace(secret, secrets[secret])
    return out


def _locate(lines: Sequence[str], f: Finding) -> str | None:
    """The secret of `f` in the lines it covers, found by its fingerprint; None if not."""
    shape = _PREVIEW.fullmatch(f.preview)
    if shape is None or not 0 < f.line <= len(lines):
        return None
    size, prefix = int(shape["n"]), shape["prefix"]
    region = "\n".join(lines[f.line - 1 : max(f.line, f.end_line or f.line)])
    if size == 0 or size > len(region):
        return None
    starts: Iterator[int] = _occurrences(region, prefix) if prefix else iter(range(len(region)))
    for i in starts:
        candidate = region[i : i + size]
        if len(candidate) == size and fingerprint(candidate) == f.fingerprint:
            return candidate
    return None


def _occurrences(text: str, prefix: str) -> Iterator[int]:
    i = text.find(prefix)
    while i >= 0:
        yield i
        i = text.find(prefix, i + 1)


def _has_canary(body: bytes, texts: Sequence[str], canaries: Sequence[str]) -> bool:
    """Whether a canary is in the raw bytes or in any decoded text (JSON escapes undone)."""
    tokens = [c for c in canaries if c]
    if not tokens:
        return False
    joined = "\x00".join(texts)
    return any(c.encode("utf-8", "surrogatepass") in body or c in joined for c in tokens)


class _NotJson:
    pass


_NOT_JSON: Any = _NotJson()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return _NOT_JSON


def _as_text(body: bytes) -> str:
    return body.decode("utf-8", "surrogateescape")


def _leaves(doc: Any) -> Iterator[str]:
    """Every string in `doc`, keys included (iterative: a deep body cannot recurse us out)."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield from node.keys()
            stack.extend(node.values())


def _replace(doc: Any, new: Mapping[str, str]) -> Any:
    """`doc` with every string (key or value) that `new` maps replaced, in place."""
    if isinstance(doc, str):
        return new.get(doc, doc)
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, str):
                    node[i] = new.get(v, v)
                else:
                    stack.append(v)
        elif isinstance(node, dict):
            pairs = list(node.items())
            node.clear()
            for k, v in pairs:
                if isinstance(v, str):
                    v = new.get(v, v)
                else:
                    stack.append(v)
                node[new.get(k, k)] = v
    return doc


def _serialise(doc: Any) -> bytes:
    # ASCII escapes: a lone surrogate the agent sent stays valid JSON.
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode("ascii")
