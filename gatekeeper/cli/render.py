"""Rendering a command's outcome: exactly one JSON object with --json, else short text.

Every refusal reaches the user as one line, mapped to its exit code by
`errors.refusal`; an unexpected exception is reported as an internal error
(exit 4, fail closed), never as a traceback. The human-text renderers below are pure
(the command's JSON data -> lines), so they are tested without a subprocess; they read
the JSON shape because that is the contract that stays fixed while gates' types change.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, ParamSpec

import click

from gatekeeper.text import sanitize

P = ParamSpec("P")
Data = Mapping[str, Any]


@dataclass(frozen=True)
class Outcome:
    data: Data
    code: int = 0
    lines: Sequence[str] | None = None  # None: print the data as JSON; []: print nothing


def ascii_json(obj: Any, indent: int | None = None) -> str:
    """JSON that cannot carry a terminal control raw: every non-ASCII character (bidi
    overrides, C1 controls) as \\uXXXX, C0 controls escaped by JSON itself, and DEL —
    ASCII, so `ensure_ascii` keeps it — escaped too. DEL only occurs inside strings."""
    return json.dumps(obj, ensure_ascii=True, indent=indent).replace("\x7f", "\\u007f")


def emit_json(obj: Data) -> None:
    sys.stdout.write(ascii_json(obj) + "\n")
    sys.stdout.flush()


def error_line(kind: str, message: str) -> str:
    """The one stderr line of a refusal: its first line only, sanitised."""
    return f"oms: {kind}: {first_line(kind, message)}"


def first_line(kind: str, message: str) -> str:
    return sanitize(message.splitlines()[0] if message else kind)


def emit_error(as_json: bool, code: int, kind: str, message: str, data: Data | None = None) -> None:
    if as_json:
        emit_json({"ok": False, "oms_exit_code": code, **(data or {}),
                   "error": {"kind": kind, "message": first_line(kind, message)}})  # fmt: skip
    else:
        click.echo(error_line(kind, message), err=True)


def _refuse(exc: Exception, as_json: bool) -> NoReturn:
    # Imported on the refusal path only: gatekeeper.errors pulls in the evidence, policy and
    # sandbox packages (pydantic, cryptography), which `oms --help` must not pay for.
    from gatekeeper.errors import InternalError, refusal

    err = refusal(exc)
    if isinstance(err, InternalError) and os.environ.get("OMS_DEBUG"):
        traceback.print_exc()
    # A refusal that was recorded carries its data (e.g. the evidence seq).
    emit_error(as_json, err.exit_code, err.kind, err.message, err.data)
    sys.exit(err.exit_code)


def _show(outcome: Outcome, as_json: bool) -> None:
    if as_json:
        # `exit_code` is left to the data (e.g. a sandboxed command's own exit code).
        emit_json({"ok": outcome.code == 0, "oms_exit_code": outcome.code, **outcome.data})
        return
    lines = outcome.lines
    if lines is None:
        lines = [ascii_json(outcome.data, indent=2)]
    for line in lines:
        click.echo(line)


def command(fn: Callable[P, Outcome]) -> Callable[P, None]:
    """Wrap a click callback: add --json, render its Outcome, map refusals to exit codes."""

    @click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        as_json = bool(kwargs.pop("as_json", False))
        try:
            outcome = fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except Exception as exc:
            _refuse(exc, as_json)
        _show(outcome, as_json)
        sys.exit(outcome.code)

    return wrapper


# ------------------------------------------------------------------ evidence ---


def init_lines(data: Data) -> list[str]:
    verb = "initialised" if data["created"] else "already initialised"
    return [f"{verb}: {data['repo_id']} (key {data['key_id'][:16]})"]


def audit_lines(report: Data) -> list[str]:
    if report["intact"]:
        return [f"intact: {report['entries']} entries, checkpoint at {report['checkpoint_size']}"]
    return [f"TAMPERED at seq {report['first_bad_seq']}: {sanitize(report['reason'] or '')}"]


def export_lines(envelope: Data) -> list[str]:
    return [json.dumps(envelope, indent=2)]


def note_lines(data: Data) -> list[str]:
    return [f"appended note as seq {data['seq']}"]


def key_lines(data: Data) -> list[str]:
    return [f"key_id {data['key_id']}", data["public_key_pem"].rstrip()]


def repair_lines(data: Data) -> list[str]:
    if data.get("adopted_entries"):
        return [f"adopted {data['adopted_entries']} entries of an interrupted append"]
    if data["repaired"]:
        return [f"quarantined {data['quarantined_bytes']} bytes; recorded as seq {data['seq']}"]
    return ["nothing to repair"]


# ------------------------------------------------------------ doctor, gates ---


def doctor_lines(report: Data, ready: bool) -> list[str]:
    bwrap, gl, key = report["bwrap"], report["gitleaks"], report["key"]
    lines = [
        f"bwrap:    {bwrap.get('path', bwrap.get('error'))} {bwrap.get('version', '')}",
        f"probe:    {'ok' if report['probe']['ok'] else 'FAILED'} "
        + "; ".join(report["probe"].get("failures", [])),
        f"apparmor: {report['apparmor']}",
        f"gitleaks: {gl.get('version') if gl['ok'] else gl.get('error')}",
        f"key:      {key.get('key_id') or key.get('error')}",
    ]
    if "evidence" in report:
        lines.append(f"evidence: {report['evidence']}")
    lines += authority_lines(report)
    lines += [f"problem:  {p}" for p in report["problems"]]
    lines += [f"remedy:   {r}" for r in report["remedies"]]
    lines.append("ready" if ready else "NOT READY")
    return [sanitize(x) for x in lines]


def authority_lines(report: Data) -> list[str]:
    """Who could sign here, said plainly, and what each egress mode of `oms agent run` is."""
    if "authority" not in report:
        return []
    who = report["authority"]
    where = (
        f"inside an oms agent sandbox (run {who['run_id'] or 'unknown'}): no authority here"
        if who["inside_agent_sandbox"]
        else "not inside an oms agent sandbox"
    )
    readable = "yes" if who["key_readable"] else "no"
    lines = [f"authority: signing key readable by this process: {readable}",
             f"authority: {where}", f"authority: {who['note']}"]  # fmt: skip
    egress = report.get("egress") or {}
    lines += [f"egress:   {mode}: {text}" for mode, text in egress.get("modes", {}).items()]
    if egress:
        lines.append(f"egress:   a secret in an api request: {egress['on_secret']} "
                     "([agent.egress] on_secret)")  # fmt: skip
    return lines


def sandbox_lines(data: Data) -> list[str]:
    """The sandboxed command's own output as it wrote it, then one status line."""
    lines = [x for x in (data["stdout"].rstrip("\n"), data["stderr"].rstrip("\n")) if x]
    status = "timed out" if data["timed_out"] else f"exit {data['exit_code']}"
    return [*lines, f"[oms sandbox: {status} in {data['duration_s']} s]"]


def scan_lines(data: Data) -> list[str]:
    lines = [
        f"{f['file']}:{f['line']}: {f['rule']} ({f['scanner']}) {f['preview']}"
        + (" [allowed]" if f["allowed"] else "")
        for f in data["findings"]
    ]
    lines.append(f"{data['blocking']} finding(s) not allowed by policy")
    return [sanitize(x) for x in lines]


def result_lines(verdict: Data) -> list[str]:
    head = (
        f"{verdict['decision']}: {verdict['commit'][:12]} (base {verdict['base'][:12]}), "
        f"evidence seq {verdict['evidence_seq']}"
    )
    notes = [f"  note: the candidate changes {sanitize(t['lock'])}; its checks ran with the "
             f"base's toolchain {sanitize(t['name'])}"
             for t in verdict.get("toolchains", ()) if t["lock_changed"]]  # fmt: skip
    return [head, *(f"  - {sanitize(r)}" for r in verdict["reasons"]), *notes]


# ------------------------------------------------------------------ transfer ---


def preview_lines(data: Data) -> list[str]:
    packet = data["approval_packet"]
    return [*packet["summary"], "", packet["copyable_text_block"]]


def approve_lines(data: Data) -> list[str]:
    return [f"approved by {sanitize(data['approver']['name'])} until {data['expires']}"]


def release_lines(data: Data, out: str) -> list[str]:
    return [f"released {data['payload_bytes']} bytes to {out}"]


def show_lines(data: Data) -> list[str]:
    return [f"{data['status']}: {data['digest']}", *data["approval_packet"]["summary"]]


def list_lines(data: Data) -> list[str]:
    lines = [
        f"{r['status']:<10} {r['digest']} {sanitize(r['destination'])} {r['bytes']} bytes"
        for r in data["transfers"]
    ]
    return lines or ["no transfers"]


# ----------------------------------------------------------------------- mcp ---


def snippet_lines(snippets: Data) -> list[str]:
    lines = []
    for name, snip in snippets.items():
        lines.append(f"# {name}")
        for key, value in snip.items():
            text = value if isinstance(value, str) else json.dumps(value, indent=2)
            lines += [f"## {key}", text.rstrip("\n")]
    return lines


# ------------------------------------------------------------------ agent ---


def agent_lines(data: Data) -> list[str]:
    """After the agent had the terminal: the run, its exit, what came back, what to do next."""
    code = data["exit_code"]
    status = "timed out" if data["timed_out"] else f"exit {code}"
    eg = data["egress"]
    lines = [f"oms agent run {data['run_id']}: {status}; egress {data['egress_mode']}: "
             f"{eg['requests']} requests, {eg['forwarded']} forwarded, {eg['redacted']} "
             f"redacted, {eg['blocked']} blocked"]  # fmt: skip
    if data["candidate"]:
        ref = data["candidate_ref"]
        lines.append(f"candidate {data['candidate'][:12]} as {ref}")
        lines.append(f"next: oms process-result --candidate {ref}")
    else:
        lines.append("no changes: nothing to verify")
    return lines
