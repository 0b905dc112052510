"""What the broker does to a request body before it may leave: canaries, secrets, redaction.

Scanning must not grow with the square of a conversation (issue 12, "Egress"): a JSON
body is parsed and only its string leaves (keys and values) not yet seen in this run
are scanned, in one `scan_with_policy` call (one Gitleaks start-up per request); each
leaf's verdict is cached by its SHA-256, so a leaf redacted once is redacted again when
the agent resends it. The new leaves of a request are one item, concatenated in
document order without a separator, so that a secret split across two blocks of one
request is seen whole (issue 29); each finding is mapped back to the leaves it spans,
and each redacts its own part. A secret split across two requests, or between a leaf
seen before and a new one, is not seen whole: a stated limit (docs/threat-model.md).
A body that is not JSON (or has duplicate keys, which a provider might read differently
from us) is scanned as one text; header and query values are scanned each on its own.
No secret value leaves this module: findings carry rule and fingerprint, and a redacted
text has each secret replaced by a mark naming the rule.
"""

from __future__ import annotations

import hashlib
import itertools
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
    """A request as the broker may forward it: its body, header and query values after
    redaction."""

    body: bytes
    headers: tuple[tuple[str, str], ...]
    query: tuple[tuple[str, str], ...]
    findings: tuple[Finding, ...]  # not allowed by policy, over every leaf
    canary: bool
    redacted: bool


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ScanCache:
    """One run's verdicts by text digest; the new texts of a request are scanned in one call.

    Not thread-safe: the broker scans one request at a time."""

    def __init__(self, loaded: LoadedPolicy, scan: Scan = scan_with_policy) -> None:
        self._loaded = loaded
        self._scan = scan
        self._verdicts: dict[str, Verdict] = {}
        self.scanned_bytes = 0

    def verdicts(self, groups: Sequence[Sequence[str]]) -> dict[str, Verdict]:
        """The verdict of every text in `groups`. The texts of a group not seen before are
        scanned as one item, joined in their order without a separator (the first
        occurrence of a text counts), and each finding is mapped back to the texts it spans."""
        plans: list[list[str]] = []
        taken: set[str] = set()
        for texts in groups:
            new = [t for t in dict.fromkeys(texts)
                   if t not in taken and digest(t) not in self._verdicts]  # fmt: skip
            taken.update(new)
            if new:
                plans.append(new)
        if plans:
            items = [ScanItem.whole(f"request-{i}", "".join(p)) for i, p in enumerate(plans)]
            report = self._scan(items, self._loaded)  # ScannerUnavailable: nothing cached
            found: dict[str, list[Finding]] = {}
            for f in report.blocking:
                found.setdefault(f.file, []).append(f)
            for item, plan in zip(items, plans, strict=True):
                for text, verdict in zip(plan, split(plan, found.get(item.path, ())), strict=True):
                    self._verdicts[digest(text)] = verdict
            self.scanned_bytes += sum(_size(t) for p in plans for t in p)
        return {t: self._verdicts[digest(t)] for texts in groups for t in texts}


def inspect(
    body: bytes,
    headers: Sequence[tuple[str, str]],
    query: Sequence[tuple[str, str]],
    cache: ScanCache,
    canaries: Sequence[str],
) -> Inspection:
    """`body`, header and query values checked for canaries, scanned (new texts only) and
    redacted.

    A body is re-serialised only when something in it was redacted; otherwise the bytes
    the agent sent are the bytes forwarded."""
    doc = _parse(body)
    texts = list(_leaves(doc)) if doc is not _NOT_JSON else [_as_text(body)]
    values = [v for _, v in (*headers, *query)]
    if _has_canary(body, [*texts, *values], canaries):
        return Inspection(body, tuple(headers), tuple(query), (), canary=True, redacted=False)
    verdicts = cache.verdicts([texts, *([v] for v in values)])
    replaced = {t: v.redacted for t, v in verdicts.items() if v.redacted is not None}
    findings = tuple(dict.fromkeys(f for v in verdicts.values() for f in v.findings))
    if not replaced:
        return Inspection(body, tuple(headers), tuple(query), findings, False, False)
    new_headers = tuple((k, replaced.get(v, v)) for k, v in headers)
    new_query = tuple((k, replaced.get(v, v)) for k, v in query)
    if doc is _NOT_JSON:
        new_body = replaced.get(texts[0], texts[0]).encode("utf-8", "surrogateescape")
    else:
        new_body = _serialise(_replace(doc, replaced))
    return Inspection(new_body, new_headers, new_query, findings, canary=False, redacted=True)


def split(texts: Sequence[str], findings: Sequence[Finding]) -> list[Verdict]:
    """Each of `texts`' verdict, from the findings over their concatenation: a text holds
    the findings whose secret touches it, and has its own part of each secret replaced."""
    spans = _spans("".join(texts), findings)
    out, start = [], 0
    for text in texts:
        end = start + len(text)
        mine = [Span(max(sp.start, start) - start, min(sp.end, end) - start, sp.findings)
                for sp in spans if sp.start < end and sp.end > start]  # fmt: skip
        fs = tuple(dict.fromkeys(f for sp in mine for f in sp.findings))
        out.append(Verdict(fs, _apply(text, mine) if mine else None))
        start = end
    return out


def redact(text: str, findings: Sequence[Finding]) -> str:
    """`text` with each finding's secret replaced by a mark naming its rule."""
    return _apply(text, _spans(text, findings))


@dataclass(frozen=True)
class Span:
    """Where a secret is in a text; the mark names the first finding's rule."""

    start: int
    end: int
    findings: tuple[Finding, ...]


def _spans(text: str, findings: Sequence[Finding]) -> list[Span]:
    """Where each finding's secret is in `text`, overlaps merged (the longer one's rule first).

    The secret is found by its fingerprint (its length and prefix come from the finding's
    preview), in the lines the finding covers; every occurrence of it in the text is then
    a span. A secret that cannot be found that way has its whole lines as the span."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    raw: list[Span] = []
    for f in findings:
        secret = _locate(lines, f)
        if secret is not None:
            raw += [Span(i, i + len(secret), (f,)) for i in _occurrences(text, secret)]
        elif 0 < f.line <= len(lines):
            last = min(max(f.line, f.end_line or f.line), len(lines))
            raw.append(Span(starts[f.line - 1], starts[last] - 1, (f,)))
    merged: list[Span] = []
    for sp in sorted(raw, key=_order):
        if merged and sp.start < merged[-1].end:
            last_sp = merged[-1]
            merged[-1] = Span(last_sp.start, max(last_sp.end, sp.end),
                              last_sp.findings + sp.findings)  # fmt: skip
        else:
            merged.append(sp)
    return merged


def _order(sp: Span) -> tuple[int, int, str, str]:
    # The mark's rule: the longest secret's, then by scanner and rule (the same every run).
    return (sp.start, sp.start - sp.end, sp.findings[0].scanner, sp.findings[0].rule)


def _apply(text: str, spans: Sequence[Span]) -> str:
    out, at = [], 0
    for sp in sorted(spans, key=lambda sp: sp.start):
        out += [text[at : sp.start], REDACTED.format(rule=sp.findings[0].rule)]
        at = sp.end
    return "".join([*out, text[at:]])


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


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
    """Whether a canary is in the raw bytes or in the decoded texts (JSON escapes undone),
    also across texts joined as the scan joins them (first occurrences, no separator)."""
    tokens = [c for c in canaries if c]
    if not tokens:
        return False
    joined = "".join(dict.fromkeys(texts))
    return any(c.encode("utf-8", "surrogatepass") in body or c in joined for c in tokens)


class _NotJson:
    pass


_NOT_JSON: Any = _NotJson()
_END: Any = object()


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
    """Every string in `doc`, keys included, in document order (iterative: a deep body
    cannot recurse us out)."""
    stack: list[Iterator[Any]] = [iter([doc])]
    while stack:
        node = next(stack[-1], _END)
        if node is _END:
            stack.pop()
        elif isinstance(node, str):
            yield node
        elif isinstance(node, list):
            stack.append(iter(node))
        elif isinstance(node, dict):
            stack.append(itertools.chain.from_iterable(node.items()))


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
