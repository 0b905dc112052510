"""The `oms` command line: parse, call one gate function, render. No decisions here."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.render import Outcome, command, emit_error
from gatekeeper.errors import EXIT_BLOCKED, EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, UsageError
from gatekeeper.gates import doctor as doctor_mod
from gatekeeper.gates import records
from gatekeeper.gates import sandboxed as sandboxing
from gatekeeper.gates import secrets as scanning
from gatekeeper.gates.result import pipeline as result_gate
from gatekeeper.gates.transfer import gate as transfer_gate
from gatekeeper.repo.git import open_repo
from gatekeeper.text import sanitize

REPO_OPTION = click.option(
    "--repo",
    "repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The repository.",
)

# approve, release and show: a digest names its manifest wherever oms is run from, so the
# copied approval command works as copied. `--repo` is still accepted.
DIGEST_REPO_OPTION = click.option(
    "--repo",
    "repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The repository (default: the current one if it holds the manifest, else the one "
    "the manifest names).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="oh-my-super-agent", prog_name="oms")
def cli() -> None:
    """oms: a fail-closed gatekeeper for AI coding agents."""


@cli.command()
@REPO_OPTION
@click.option("--default-branch", help="The branch whose tip is the trusted base (recorded in "
              "the state root; default: origin/HEAD, else main, else master).")  # fmt: skip
@command
def init(repo: Path, default_branch: str | None) -> Outcome:
    """Create the state root, signing key and evidence log for a repository."""
    data = records.init(repo, default_branch)
    verb = "initialised" if data["created"] else "already initialised"
    return Outcome(data, lines=[f"{verb}: {data['repo_id']} (key {data['key_id'][:16]})"])


@cli.group()
def evidence() -> None:
    """The evidence store: audit, show, prove, export, note, key, repair."""


@evidence.command("audit")
@REPO_OPTION
@command
def evidence_audit(repo: Path) -> Outcome:
    """Verify the whole log, blobs, checkpoints and witness offline."""
    report = records.audit_repo(repo)
    if report.intact:
        line = f"intact: {report.entries} entries, checkpoint at {report.checkpoint_size}"
        return Outcome(report.to_json(), lines=[line])
    line = f"TAMPERED at seq {report.first_bad_seq}: {sanitize(report.reason or '')}"
    return Outcome(report.to_json(), code=EXIT_BLOCKED, lines=[line])


@evidence.command("show")
@click.argument("seq", type=click.IntRange(min=0))
@REPO_OPTION
@command
def evidence_show(seq: int, repo: Path) -> Outcome:
    """Print one entry."""
    return Outcome(records.show(repo, seq))


@evidence.command("prove")
@click.argument("seq", type=click.IntRange(min=0))
@REPO_OPTION
@command
def evidence_prove(seq: int, repo: Path) -> Outcome:
    """Inclusion proof of an entry against the latest checkpoint, verified."""
    data = records.prove_entry(repo, seq)
    code = 0 if data["verified"] else EXIT_BLOCKED
    return Outcome(data, code=code)


@evidence.command("export")
@click.argument("seq", type=click.IntRange(min=0))
@click.option("--dsse", is_flag=True, required=True, help="A DSSE envelope (the only format).")
@REPO_OPTION
@command
def evidence_export(seq: int, dsse: bool, repo: Path) -> Outcome:
    """Export an entry as a DSSE envelope holding an in-toto Statement v1."""
    env = records.export_entry(repo, seq)
    return Outcome({"envelope": env}, lines=[json.dumps(env, indent=2)])


@evidence.command("note")
@click.option("--message", "-m", required=True, help="The note text.")
@click.option(
    "--attach", type=click.Path(dir_okay=False, path_type=Path), help="A file to store as a blob."
)
@REPO_OPTION
@command
def evidence_note(message: str, attach: Path | None, repo: Path) -> Outcome:
    """Append a human note."""
    data = records.note(repo, message, attach)
    return Outcome(data, lines=[f"appended note as seq {data['seq']}"])


@evidence.command("key")
@REPO_OPTION
@command
def evidence_key(repo: Path) -> Outcome:
    """Print the public signing key and its id."""
    data = records.key_info(repo)
    return Outcome(data, lines=[f"key_id {data['key_id']}", data["public_key_pem"].rstrip()])


@evidence.command("repair")
@REPO_OPTION
@command
def evidence_repair(repo: Path) -> Outcome:
    """Move a torn last line to quarantine (never a complete entry) and record it."""
    data = records.repair(repo)
    if data.get("adopted_entries"):
        line = f"adopted {data['adopted_entries']} entries of an interrupted append"
    elif data["repaired"]:
        line = f"quarantined {data['quarantined_bytes']} bytes; recorded as seq {data['seq']}"
    else:
        line = "nothing to repair"
    return Outcome(data, lines=[line])


@cli.command()
@REPO_OPTION
@command
def doctor(repo: Path) -> Outcome:
    """Readiness: a real sandbox probe, AppArmor status, key and chain."""
    report, ready = doctor_mod.doctor(repo)
    if report["repository"]["ok"]:  # a repository was found: the MCP tools it would serve
        from gatekeeper.mcp.server import digest_for_doctor  # the MCP SDK only when needed

        report["mcp_tools_digest"] = digest_for_doctor(repo)
    gl = report["gitleaks"]
    lines = [
        f"bwrap:    {report['bwrap'].get('path', report['bwrap'].get('error'))} "
        f"{report['bwrap'].get('version', '')}",
        f"probe:    {'ok' if report['probe']['ok'] else 'FAILED'} "
        + "; ".join(report["probe"].get("failures", [])),
        f"apparmor: {report['apparmor']}",
        f"gitleaks: {gl.get('version') if gl['ok'] else gl.get('error')}",
        f"key:      {report['key'].get('key_id') or report['key'].get('error')}",
    ]
    if "evidence" in report:
        lines.append(f"evidence: {report['evidence']}")
    lines += [f"problem:  {p}" for p in report["problems"]]
    lines += [f"remedy:   {r}" for r in report["remedies"]]
    lines.append("ready" if ready else "NOT READY")
    lines = [sanitize(x) for x in lines]
    return Outcome(report, code=0 if ready else EXIT_UNAVAILABLE, lines=lines)


@cli.group()
def sandbox() -> None:
    """Run a command in the check sandbox."""


@sandbox.command("run", context_settings={"ignore_unknown_options": True})
@REPO_OPTION
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Wall-clock limit in seconds.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@command
def sandbox_run(repo: Path, timeout: int | None, cmd: tuple[str, ...]) -> Outcome:
    """Run CMD in the check profile on a scratch copy of the repository's HEAD."""
    data = sandboxing.sandbox_run(repo, list(cmd), timeout)
    lines = [data["stdout"].rstrip("\n"), data["stderr"].rstrip("\n")]
    lines = [x for x in lines if x]
    status = "timed out" if data["timed_out"] else f"exit {data['exit_code']}"
    lines.append(f"[oms sandbox: {status} in {data['duration_s']} s]")
    code = 0 if data["exit_code"] == 0 and not data["timed_out"] else EXIT_FAILED
    return Outcome(data, code=code, lines=lines)


@cli.command("scan")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--diff", "diff", metavar="BASE..HEAD", help="Scan what a commit range adds.")
@click.option("--stdin", "use_stdin", is_flag=True, help="Scan standard input.")
@click.option("--sarif", type=click.Path(dir_okay=False, path_type=Path), help="Write SARIF 2.1.0.")
@REPO_OPTION
@command
def scan_cmd(
    paths: tuple[Path, ...], diff: str | None, use_stdin: bool, sarif: Path | None, repo: Path
) -> Outcome:
    """Secrets in PATHs, a commit range or stdin, from Gitleaks and detect-secrets (exit 3)."""
    text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if use_stdin else None
    result = scanning.scan(repo, list(paths), diff, text, sarif)
    data, code = result.to_json(), result.exit_code
    lines = [
        f"{f['file']}:{f['line']}: {f['rule']} ({f['scanner']}) {f['preview']}"
        + (" [allowed]" if f["allowed"] else "")
        for f in data["findings"]
    ]
    lines.append(f"{data['blocking']} finding(s) not allowed by policy")
    return Outcome(data, code=code, lines=[sanitize(x) for x in lines])


@cli.command("process-result")
@REPO_OPTION
@click.option("--candidate", required=True, help="The agent's commit (any ref).")
@click.option("--base", help="Narrow the diff to BASE..CANDIDATE (an ancestor of the candidate "
              "on the default branch; default: their merge-base). The policy and plan always "
              "come from the default branch's tip.")  # fmt: skip
@click.option("--ticket", help="Ticket id, recorded in evidence.")
@click.option("--attempt", type=click.IntRange(min=1), help="Attempt number, recorded.")
@click.option("--deliver-branch", help="On READY_FOR_HUMAN: create or fast-forward this branch.")
@click.option("--push", "push_remote", help="With --deliver-branch: push it (never forced).")
@click.option("--draft-pr", is_flag=True, help="With --deliver-branch: open a draft PR via gh.")
@command
def process_result_cmd(
    repo: Path,
    candidate: str,
    base: str | None,
    ticket: str | None,
    attempt: int | None,
    deliver_branch: str | None,
    push_remote: str | None,
    draft_pr: bool,
) -> Outcome:
    """The result gate: frozen plan from the base, sandboxed checks, both scanners, evidence."""
    v = result_gate.process_result(
        repo, candidate, base, ticket, attempt, deliver_branch, push_remote, draft_pr
    )
    lines = [f"{v.decision}: {v.commit[:12]} (base {v.base[:12]}), evidence seq {v.evidence_seq}"]
    lines += [f"  - {sanitize(r)}" for r in v.reasons]
    return Outcome(v.to_json(), code=v.exit_code, lines=lines)


@cli.group()
def transfer() -> None:
    """The data boundary: preview, approve, release, show, list."""


@transfer.command("preview")
@REPO_OPTION
@click.option("--to", "to", required=True, metavar="PROVIDER:MODEL", help="The destination.")
@click.option("--purpose", required=True, help="Why the context leaves (sent too).")
@click.option(
    "--context", type=click.Choice(["repo", "diff", "paths", "none"]), default="none",
    show_default=True,
)  # fmt: skip
@click.option("--path", "paths", multiple=True, help="With --context paths: a file or folder.")
@click.option("--base", help="With --context diff: the base (default: the default branch).")
@click.option("--kind", type=click.Choice(["cli", "api", "browser"]), default="api",
              show_default=True, help="How the destination is reached.")  # fmt: skip
@click.option("--redact", is_flag=True, help="Replace lines with findings instead of blocking.")
@command
def transfer_preview(repo: Path, to: str, purpose: str, context: str, paths: tuple[str, ...],
                     base: str | None, kind: str, redact: bool) -> Outcome:  # fmt: skip
    """Build, scan, sign and record a transfer manifest, and print its approval packet."""
    data = transfer_gate.preview(repo, to, purpose, context, list(paths), base, redact, kind)
    lines = [
        *data["approval_packet"]["summary"],
        "",
        data["approval_packet"]["copyable_text_block"],
    ]
    return Outcome(data, code=EXIT_BLOCKED if data["status"] == "blocked" else 0, lines=lines)


@transfer.command("approve")
@click.argument("digest")
@click.option("--code", required=True, help="The code from the approval packet.")
@DIGEST_REPO_OPTION
@command
def transfer_approve(digest: str, code: str, repo: Path | None) -> Outcome:
    """Approve one manifest: a human at the controlling terminal, or an autopilot rule."""
    data = transfer_gate.approve(repo, digest, code)
    name = sanitize(data["approver"]["name"])
    return Outcome(data, lines=[f"approved by {name} until {data['expires']}"])


@transfer.command("release")
@click.argument("digest")
@click.option("--out", default="-", show_default=True, help="FILE, or - for standard output.")
@DIGEST_REPO_OPTION
@command
def transfer_release(digest: str, out: str, repo: Path | None) -> Outcome:
    """Write the approved payload, once, if nothing changed since the preview."""
    if out == "-" and "--json" in sys.argv:
        raise UsageError("with --json, give --out FILE (stdout carries the JSON)")
    if out == "-":
        data, payload = transfer_gate.release(repo, digest, out)
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return Outcome(data, lines=[])
    # Create the file first, so an unwritable --out does not spend the approval.
    try:
        fh = open(out, "xb")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    try:
        data, payload = transfer_gate.release(repo, digest, out)
        fh.write(payload)
        fh.close()
    except BaseException:
        fh.close()
        if Path(out).stat().st_size == 0:
            Path(out).unlink()
        raise
    return Outcome(data, lines=[f"released {data['payload_bytes']} bytes to {out}"])


@transfer.command("show")
@click.argument("digest")
@DIGEST_REPO_OPTION
@command
def transfer_show(digest: str, repo: Path | None) -> Outcome:
    """A manifest, its packet and its state."""
    data = transfer_gate.show(repo, digest)
    lines = [f"{data['status']}: {data['digest']}", *data["approval_packet"]["summary"]]
    return Outcome(data, lines=lines)


@transfer.command("list")
@REPO_OPTION
@command
def transfer_list(repo: Path) -> Outcome:
    """Every manifest of this repository and its state."""
    data = transfer_gate.list_transfers(repo)
    lines = [f"{r['status']:<10} {r['digest']} {sanitize(r['destination'])} {r['bytes']} bytes"
             for r in data["transfers"]]  # fmt: skip
    return Outcome(data, lines=lines or ["no transfers"])


@cli.group(invoke_without_command=True)
@REPO_OPTION
@click.pass_context
def mcp(ctx: click.Context, repo: Path) -> None:
    """Serve MCP over stdio for one repository (`oms mcp`), or print client snippets."""
    if ctx.invoked_subcommand is None:
        from gatekeeper.mcp.server import serve

        serve(repo)


@mcp.command("config")
@click.option("--client", type=click.Choice(["claude-code", "codex", "json"]), default="json",
              show_default=True)  # fmt: skip
@REPO_OPTION
@command
def mcp_config(client: str, repo: Path) -> Outcome:
    """Registration snippets for Claude Code and Codex (installed package and source checkout)."""
    top = str(open_repo(repo).top)
    checkout_python = str(Path(sys.executable))
    installed = ["oms", "mcp", "--repo", top]
    # -P: the current directory (a repository, the agent's ground) is never on the import path.
    source = [checkout_python, "-P", "-m", "gatekeeper", "mcp", "--repo", top]
    snippets: dict[str, dict[str, Any]] = {
        "claude-code": {
            "installed": f"claude mcp add oms -- {shlex.join(installed)}",
            "source_checkout": f"claude mcp add oms -- {shlex.join(source)}",
            ".mcp.json": {"mcpServers": {"oms": {"command": "oms", "args": installed[1:]}}},
        },
        "codex": {
            "installed": "[mcp_servers.oms]\n"
            f"command = {json.dumps('oms')}\n"
            f"args = {json.dumps(installed[1:])}\n",
            "source_checkout": "[mcp_servers.oms]\n"
            f"command = {json.dumps(checkout_python)}\n"
            f"args = {json.dumps(source[1:])}\n",
            "file": "~/.codex/config.toml",
        },
    }
    chosen = snippets if client == "json" else {client: snippets[client]}
    lines = []
    for name, snip in chosen.items():
        lines.append(f"# {name}")
        for key, value in snip.items():
            text = value if isinstance(value, str) else json.dumps(value, indent=2)
            lines += [f"## {key}", text.rstrip("\n")]
    return Outcome({"snippets": chosen}, lines=lines)


@mcp.command("tools-digest")
@REPO_OPTION
@command
def mcp_tools_digest(repo: Path) -> Outcome:
    """SHA-256 of the canonical tools/list result, to pin the tool definitions."""
    import anyio

    from gatekeeper.mcp.server import tools_digest

    digest, names = anyio.run(tools_digest, repo)
    return Outcome({"tools_digest": digest, "tools": names}, lines=[digest])


@cli.group()
def release() -> None:
    """Release readiness of oms itself."""


@release.command("status")
@command
def release_status() -> Outcome:
    """Always `not_stable`: nothing in oms merges or releases."""
    return Outcome({"status": "not_stable"}, lines=["not_stable"])


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="oms", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        emit_error("--json" in args, EXIT_USAGE, "usage", "aborted")
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        emit_error("--json" in args, EXIT_USAGE, "usage", exc.format_message())
        sys.exit(EXIT_USAGE)
    sys.exit(0)
