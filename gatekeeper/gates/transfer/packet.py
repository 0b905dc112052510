"""What a human reads before saying yes: the approval packet and the terminal prompt.

Every line is neutralised (control, escape, bidirectional and zero-width characters shown
as escapes) and nothing is cut: what a human approves is shown whole.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.transfer.manifest import Manifest
from gatekeeper.gates.transfer.tty import wrap_exact
from gatekeeper.text import sanitize


@dataclass(frozen=True)
class Packet:
    """Summary lines and the one command a human copies (empty for a blocked manifest)."""

    summary: tuple[str, ...]
    copyable_text_block: str

    def to_json(self) -> dict[str, Any]:
        return {"summary": list(self.summary), "copyable_text_block": self.copyable_text_block}


def _clean(text: str) -> str:
    """One neutralised line, never cut."""
    return sanitize(text, limit=sys.maxsize)


def risk_lines(m: Manifest) -> list[str]:
    risks = []
    if m.visibility.state == "dirty":
        risks.append("the worktree has uncommitted changes: what leaves is not in any commit")
    if m.visibility.state == "unpushed":
        risks.append("HEAD has commits not on its upstream: this code is not public yet")
    if m.redactions:
        lines = len({(r.path, r.line) for r in m.redactions})
        risks.append(f"{len(m.redactions)} secret finding(s) redacted ({lines} line(s) replaced)")
    return [f"risk: {r}" for r in risks]


SHOWN_FINDINGS = 10


def secret_lines(m: Manifest) -> list[str]:
    """Where each secret that blocks is: file, line, rule and fingerprint (never the value),
    so a human knows which file to fix; the file name is neutralised with the summary."""
    lines = [f"  secret in {f.file} line {f.line}: {f.rule} ({f.scanner}), fingerprint "
             f"{f.fingerprint[:16]}" for f in m.findings[:SHOWN_FINDINGS]]  # fmt: skip
    more = len(m.findings) - SHOWN_FINDINGS
    return lines + ([f"  … and {more} more (--json lists them all)"] if more > 0 else [])


def _destination_line(m: Manifest) -> str:
    d = m.destination
    return f"destination: {d.provider}:{d.model} ({d.kind})"


def _repository_line(m: Manifest) -> str:
    upstream = f" (upstream {m.visibility.upstream})" if m.visibility.upstream else ""
    return (
        f"repository: {m.branch or '(detached)'} at {m.head[:12]}, {m.visibility.state}" + upstream
    )


def _context_line(m: Manifest) -> str:
    return (f"context: {m.context}; {m.totals.items} item(s), {m.totals.bytes} bytes; "
            f"{m.totals.excluded} path(s) excluded")  # fmt: skip


def approval_command(m: Manifest, digest: Sha256Digest) -> str:
    """The copyable command; it works as copied from any directory (`state.locate`)."""
    return f"oms transfer approve {digest} --code {m.nonce[:8]}"


def packet(m: Manifest, digest: Sha256Digest) -> Packet:
    summary = [
        _destination_line(m),
        f"purpose: {m.purpose}",
        _context_line(m),
        _repository_line(m),
        *risk_lines(m),
        f"expires: {m.expires}",
    ]
    if m.blocked:
        summary += [f"BLOCKED: {r}" for r in m.block_reasons]
        summary += secret_lines(m)
    if m.autopilot_rule:
        summary.append(f"autopilot rule that applies: {m.autopilot_rule}")
    command = "" if m.blocked else approval_command(m, digest)
    return Packet(tuple(_clean(s) for s in summary), command)


def prompt_lines(m: Manifest) -> list[str]:
    """What the terminal shows before it asks: everything that leaves as text, in full —
    the destination, the whole purpose (wrapped, no character dropped), every file that
    leaves, and every name the manifest itself carries. Each line neutralised."""
    lines = [
        _clean(_destination_line(m)),
        f"purpose ({len(m.purpose)} characters, in full):",
        *["  " + chunk for chunk in wrap_exact(_clean(m.purpose))],
        _clean(_repository_line(m)),
        _context_line(m),
        *risk_lines(m),
        f"files that leave ({len(m.items)}):",
        *[f"  {_clean(i.path)} ({i.bytes} bytes, {i.mode})" for i in m.items],
    ]
    if m.paths:
        lines.append(f"asked for ({len(m.paths)}):")
        lines += [f"  {_clean(p)}" for p in m.paths]
    if m.excluded:
        lines.append(f"named in the manifest, content not sent ({len(m.excluded)}):")
        lines += [f"  {_clean(e.path)}: {_clean(e.reason)}" for e in m.excluded]
    lines.append(f"expires: {m.expires}")
    return lines
