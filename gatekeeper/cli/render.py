"""Rendering a command's outcome: exactly one JSON object with --json, else short text.

Human text is plain lines (no colour, no box drawing: grep-able) unless stdout is a
terminal; there the findings, checks and doctor renderers draw rich tables (`tables.py`,
imported only then), coloured unless `NO_COLOR` is set (https://no-color.org).

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
import shutil
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, ParamSpec

import click

from gatekeeper.text import sanitize

P = ParamSpec("P")
Data = Mapping[str, Any]
TAIL_LINES = 20  # of each stream of a failed check, in human output; JSON keeps its tails


@dataclass(frozen=True)
class View:
    """How human text is drawn: `rich` tables on a terminal (coloured when `color`), plain
    lines otherwise. Renderers take one, so they are tested for both without a terminal."""

    rich: bool = False
    color: bool = False
    width: int = 100

    @classmethod
    def detect(cls) -> View:
        """Tables when stdout is a terminal; colour too unless NO_COLOR is set non-empty."""
        tty = sys.stdout.isatty()
        return cls(rich=tty, color=tty and not os.environ.get("NO_COLOR"),
                   width=shutil.get_terminal_size().columns)  # fmt: skip


PLAIN = View()


@dataclass(frozen=True)
class Outcome:
    data: Data
    code: int = 0
    lines: Sequence[str] | None = None  # None: print the data as JSON; []: print nothing
    page: bool = False  # lines longer than the terminal go through click's pager (on a tty)


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


Refused = Callable[[Data], Sequence[str]]


def _refuse(exc: Exception, as_json: bool, refused: Refused | None = None) -> NoReturn:
    # Imported on the refusal path only: gatekeeper.errors pulls in the evidence, policy and
    # sandbox packages (pydantic, cryptography), which `oms --help` must not pay for.
    from gatekeeper.errors import InternalError, refusal

    err = refusal(exc)
    if isinstance(err, InternalError) and os.environ.get("OMS_DEBUG"):
        traceback.print_exc()
    if refused is not None and not as_json and err.data:
        for line in refused(err.data):  # what was decided before the refusal (a verdict)
            click.echo(line)
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
    if outcome.page and paged(len(lines), sys.stdout.isatty(), shutil.get_terminal_size().lines):
        click.echo_via_pager("\n".join(lines) + "\n")
        return
    for line in lines:
        click.echo(line)


def paged(count: int, tty: bool, rows: int) -> bool:
    """Page (as git does) only on a terminal, and only what does not fit on one screen."""
    return tty and count >= rows


def command(fn: Callable[P, Outcome]) -> Callable[P, None]:
    """Wrap a click callback: add --json, render its Outcome, map refusals to exit codes."""
    return _wrap(fn, None)


def showing_refusals(refused: Refused) -> Callable[[Callable[P, Outcome]], Callable[P, None]]:
    """`command`, and in human output a refusal's data rendered by `refused` on stdout
    before its one stderr line (e.g. the READY verdict of a gate whose delivery failed)."""
    return lambda fn: _wrap(fn, refused)


def _cosign_after(repo: object) -> None:
    """After a command that appended has answered (its output and exit code are fixed):
    the cosigners, once (gatekeeper/work/cosign.py). Never from a hook, never for a command
    that appended nothing (then the evidence store was not even imported)."""
    store = sys.modules.get("evidence.store")
    if store is None or not getattr(store, "GROWN", None):
        return
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.command_path.split()[1:2] == ["hook"]:
        return
    from gatekeeper.work.cosign import after_command

    after_command(repo if isinstance(repo, Path) else None)


def _wrap(fn: Callable[P, Outcome], refused: Refused | None) -> Callable[P, None]:
    @click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        as_json = bool(kwargs.pop("as_json", False))
        try:
            try:
                outcome = fn(*args, **kwargs)
            except click.exceptions.Exit:
                raise
            except Exception as exc:
                _refuse(exc, as_json, refused)
            _show(outcome, as_json)
        finally:
            _cosign_after(kwargs.get("repo"))
        sys.exit(outcome.code)

    return wrapper


# ------------------------------------------------------------------ evidence ---


def init_lines(data: Data) -> list[str]:
    verb = "initialised" if data["created"] else "already initialised"
    return [f"{verb}: {data['repo_id']} (key {data['key_id'][:16]})"]


def audit_lines(report: Data) -> list[str]:
    rows = (report.get("cosign") or {}).get("cosigners", [])
    cosigned = [f"cosigned by {c['name']} at {c['size']} entries (time {c['time']})"
                for c in rows if c["size"]]  # fmt: skip
    notes = [
        sanitize(x) for x in (*cosigned, *(f"warning: {w}" for w in report.get("warnings", [])))
    ]
    if report["intact"]:
        head = f"intact: {report['entries']} entries, checkpoint at {report['checkpoint_size']}"
        return [head, *notes]
    return [
        f"TAMPERED at seq {report['first_bad_seq']}: {sanitize(report['reason'] or '')}",
        *notes,
    ]


def export_lines(envelope: Data) -> list[str]:
    return [json.dumps(envelope, indent=2)]


def note_lines(data: Data) -> list[str]:
    return [f"appended note as seq {data['seq']}"]


def key_lines(data: Data) -> list[str]:
    return [f"key_id {data['key_id']}", data["public_key_pem"].rstrip(),
            f"signer_key {data['signer_key']}"]  # fmt: skip


def repair_lines(data: Data) -> list[str]:
    if data.get("adopted_entries"):
        return [f"adopted {data['adopted_entries']} entries of an interrupted append"]
    if "adopted_entries" in data and data["repaired"]:
        return ["rewrote the checkpoint from the witness (a crash lost its last write)"]
    if data["repaired"]:
        return [f"quarantined {data['quarantined_bytes']} bytes; recorded as seq {data['seq']}"]
    return ["nothing to repair"]


# ------------------------------------------------------------ doctor, gates ---


def doctor_lines(report: Data, ready: bool, view: View = PLAIN) -> list[str]:
    if view.rich:
        # Imported here only: rich is for a terminal, not for `oms --help` (start-up time).
        from gatekeeper.cli import tables

        return tables.doctor_lines(report, ready, [sanitize(a) for a in authority_lines(report)],
                                   view)  # fmt: skip
    # Plain `name: status — detail` lines, never a section's dict.
    lines = [f"{name}: {_STATUS[ok]} — {detail}" for name, ok, detail in doctor_rows(report)]
    lines += authority_lines(report)
    lines += [f"warning:  {w}" for w in report.get("warnings", ())]
    lines += [f"problem:  {p}" for p in report["problems"]]
    lines += [f"remedy:   {r}" for r in report["remedies"]]
    lines.append("ready" if ready else "NOT READY")
    return [sanitize(x) for x in lines]


_STATUS = {True: "ok", False: "problem", None: "info"}
DOCTOR_SECTIONS = ("repository", "policy", "bwrap", "probe", "apparmor", "gitleaks", "key",
                   "evidence", "work", "kernel_memory")  # fmt: skip


def doctor_rows(report: Data) -> list[tuple[str, bool | None, str]]:
    """(section, ok — None for information only —, detail) of each doctor section."""
    rows = [(n.replace("_", " "), *doctor_section(n, report[n]))
            for n in DOCTOR_SECTIONS if n in report]  # fmt: skip
    for tool in report.get("toolchains", ()):
        rows.append((f"toolchain {tool['name']}", tool["state"] in ("ok", "prepared"),
                     f"{tool['kind']} {tool['state']}"))  # fmt: skip
    return rows


def doctor_section(name: str, part: Any) -> tuple[bool | None, str]:
    """(ok, or None for information only; detail) of one doctor section's JSON."""
    if not isinstance(part, dict):
        return None, str(part)
    if name == "apparmor":
        return None, " ".join(f"{k}={v}" for k, v in part.items() if v is not None) or "absent"
    if name == "kernel_memory":
        return part["bounded"], part.get("warning") or part["reason"]
    if name == "evidence":
        ok = bool(part.get("intact"))
        return ok, part.get("error") or part.get("reason") or (
            f"intact, {part['entries']} entries" if ok else "not initialised")  # fmt: skip
    if name == "probe":
        return part["ok"], "; ".join(part["failures"]) or f"{part.get('duration_s', '')} s"
    if name == "work":
        return part["ok"], work_line(part)
    if "error" in part:
        return False, part["error"]
    keys = ("path", "version", "source", "key_id", "repo_id", "origin")
    return part.get("ok", True), " ".join(str(part[k]) for k in keys if part.get(k))


def work_line(part: Data) -> str:
    """The doctor's `work` section (work.db against the evidence log) in a line."""
    if "error" in part:
        return str(part["error"])
    said = f"{part['transitions']} transitions, {part['entries']} work entries in the log"
    said += f", {len(part['mismatches'])} MISMATCHED" if part["mismatches"] else ""
    tampered = part.get("tampered") or []
    if tampered:
        named = ", ".join(str(t["object"]) for t in tampered[:5])
        said += f", {len(tampered)} TAMPERED ({named}{', ...' if len(tampered) > 5 else ''})"
    cut = part["interrupted"]
    if cut:
        said += f"; interrupted at seq {', '.join(str(c['seq']) for c in cut)}: {part['warning']}"
    return said


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


def scan_lines(data: Data, view: View = PLAIN) -> list[str]:
    if view.rich:
        from gatekeeper.cli import tables  # on a terminal only (start-up time)

        return tables.scan_lines(data, view)
    lines = [
        f"{f['file']}:{f['line']}: {f['rule']} ({f['scanner']}) {f['preview']}"
        + (" [allowed]" if f["allowed"] else "")
        for f in data["findings"]
    ]
    lines.append(f"{data['blocking']} finding(s) not allowed by policy")
    return [sanitize(x) for x in lines]


def result_lines(verdict: Data, view: View = PLAIN) -> list[str]:
    """The decision and its reasons, each check, the tail of each failed check's output,
    and what delivery did or why it was refused."""
    notes = [*judged_lines(verdict)]
    notes += [f"  note: the candidate changes {sanitize(t['lock'])}; its checks ran with the "
              f"base's toolchain {sanitize(t['name'])}"
              for t in verdict.get("toolchains", ()) if t["lock_changed"]]  # fmt: skip
    if view.rich:
        from gatekeeper.cli import tables  # on a terminal only (start-up time)

        return tables.result_lines(verdict, view, [*notes, *tests_lines(verdict)],
                                   delivery_lines(verdict))  # fmt: skip
    head = (
        f"{verdict['decision']}: {verdict['commit'][:12]} (base {verdict['base'][:12]}), "
        f"evidence seq {verdict['evidence_seq']}"
    )
    checks = verdict.get("checks") or []
    lines = [head, *(f"  - {sanitize(r)}" for r in verdict["reasons"]), *notes]
    lines += [f"  check {sanitize(c['name'])}: {check_status(c)} in {c['duration_ms'] / 1000:.1f} s"
              for c in checks]  # fmt: skip
    for c in checks:
        lines += check_tail_lines(c) if check_status(c) != "ok" else []
    return lines + tests_lines(verdict) + delivery_lines(verdict)


def gate_lines(verdict: Data, view: View | None = None) -> list[str]:
    """`oms process-result`'s human output: the verdict, and READY's next step after it (the
    human reviews and merges; oms never merges). `oms verify` says its own (the hold)."""
    return [*result_lines(verdict, view or View.detect()), *ready_lines(verdict)]


def ready_lines(verdict: Data) -> list[str]:
    """READY's next step: the human reviews and merges; oms never merges."""
    if verdict["decision"] != "READY_FOR_HUMAN":
        return []
    return [
        f"next: review {verdict['commit'][:12]} and merge it yourself (oms never merges); "
        f"the record: oms evidence show {verdict['evidence_seq']}"
    ]


def judged_lines(verdict: Data) -> list[str]:
    """The range judged and the trusted mark whose policy judged it; a first-run mark once."""
    judged = verdict.get("judged")
    if not judged:
        return []
    base, _, cand = judged["range"].partition("..")
    n = judged["commits"]
    count = "" if n is None else f", {n} commit{'' if n == 1 else 's'}"
    m = judged["mark"]
    lines = [
        f"  judged {base[:12]}..{cand[:12]}{count}, by the policy at the trusted mark "
        f"{m['commit'][:12]} on {sanitize(m['ref'])} ({m['by']}, entry {m['seq']})"
    ]
    if judged.get("first_run"):
        lines.append(f"  note: {sanitize(judged['first_run'])}")
    return lines


def _counted(counts: Data | None) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no tests"


def tests_lines(verdict: Data) -> list[str]:
    """What the gate compared of the tests, what runs later, and how a human accepts a
    legitimate test change (`oms evidence acknowledge`)."""
    tests = verdict.get("tests") or {}
    lines = [f"  tests {sanitize(c['check'])}: base {_counted(c['base'])}; "
             f"candidate {_counted(c['candidate'])}" for c in tests.get("counts", ())]  # fmt: skip
    if tests.get("not_inventoried"):
        names = ", ".join(sanitize(n) for n in tests["not_inventoried"])
        lines.append(f"  note: tests not inventoried (no report declared): {names}")
    named = [r for r in verdict.get("runs_later", ()) if not r["automatic"] or r["accepted"]]
    lines += [f"  note: runs later outside the sandbox (named, not blocking): "
              f"{sanitize(r['path'])} ({sanitize(r['what'])})" for r in named]  # fmt: skip
    if tests.get("acknowledged") is not None:
        lines.append(f"  note: test changes accepted by acknowledgement {tests['acknowledged']}")
    if any(i["accepted"] is None for i in tests.get("issues", ())):
        lines.append("  if a human judges these test changes legitimate: "
                     f"oms evidence acknowledge {verdict['evidence_seq']}")  # fmt: skip
    return lines


def refused_result_lines(data: Data) -> list[str]:
    """A refusal that carries a verdict (a refused delivery, a recorded BLOCKED): the verdict."""
    return result_lines(data, View.detect()) if "decision" in data else []


def check_status(check: Data) -> str:
    if check["timed_out"]:
        return "timed out"
    if check["exit_code"] is None:
        return f"killed by signal {check.get('signal')}"
    return "ok" if check["exit_code"] == 0 else f"exit {check['exit_code']}"


def check_tail_lines(check: Data, n: int = TAIL_LINES) -> list[str]:
    """The last `n` lines of each stream of one check, each line sanitised on its own."""
    name, status, lines = sanitize(check["name"]), check_status(check), []
    for stream in ("stdout", "stderr"):
        tail = check[f"{stream}_tail"].rstrip("\n").splitlines()[-n:]
        if any(x.strip() for x in tail):
            lines.append(f"check {name} ({status}): last {len(tail)} line(s) of {stream}:")
            lines += [f"  {sanitize(x)}" for x in tail]
    return lines or [f"check {name} ({status}): no output"]


def delivery_lines(verdict: Data) -> list[str]:
    d = verdict.get("delivered")
    if not d:
        return []
    if "error" in d:
        return [f"delivery refused: {first_line('delivery', d['error'])}"]
    b = d["branch"]
    lines = [f"delivered: branch {sanitize(b['branch'])} {b['action']} at {b['commit'][:12]}"]
    if d.get("push"):
        lines.append(f"delivered: pushed to {sanitize(d['push']['remote'])}")
    if d.get("draft_pr"):
        lines.append(f"delivered: draft pull request {sanitize(d['draft_pr'])}")
    return lines


# ------------------------------------------------------------------ transfer ---


def preview_lines(data: Data) -> list[str]:
    packet = data["approval_packet"]
    return [*packet["summary"], *items_lines(data), "", packet["copyable_text_block"]]


def items_lines(data: Data) -> list[str]:
    """Every file that would leave: path (sanitised), bytes and mode, as the prompt lists them."""
    items = (data.get("manifest") or {}).get("items") or []
    if not items:
        return []
    rows = [f"  {sanitize(i['path'])} ({i['bytes']} bytes, {i['mode']})" for i in items]
    return [f"files that leave ({len(items)}):", *rows]


def approve_lines(data: Data) -> list[str]:
    return [f"approved by {sanitize(data['approver']['name'])} until {data['expires']}"]


def release_lines(data: Data, out: str) -> list[str]:
    return [f"released {data['payload_bytes']} bytes to {out}"]


def show_lines(data: Data) -> list[str]:
    return [f"{data['status']}: {data['digest']}", *data["approval_packet"]["summary"],
            *items_lines(data)]  # fmt: skip


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
    if data.get("login"):  # --egress tunnel: the CLI's subscription login (docs/agent.md)
        lines.append(f"login: {sanitize(data['login'], 120)}")
    if data["candidate"]:
        ref = data["candidate_ref"]
        lines.append(f"candidate {data['candidate'][:12]} as {ref}")
        lines.append(f"next: oms process-result --candidate {ref}")
    else:
        lines.append("no changes: nothing to verify")
    return lines
