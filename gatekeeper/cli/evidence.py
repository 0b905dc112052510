"""`oms evidence …`: audit, show, log, blob, prove, export, attest, publish, verify, note,
acknowledge, key, repair and cosign."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gatekeeper.cli import render
from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_BLOCKED, UsageError
from gatekeeper.outfile import check_output, write_output
from gatekeeper.text import sanitize

# Each command imports the layers it uses in its body: `oms evidence verify --commit` runs
# on every pull request (bench/verify_bench.py), and needs none of the log's readers.
SEQ = click.argument("seq", type=click.IntRange(min=0))
DEFAULT_LIMIT = 20  # `oms evidence log`: the newest N entries


HELP = ("Evidence: audit, show, log, blob, prove, export, attest, publish, verify, note, "
        "acknowledge, key, repair, cosign.")  # fmt: skip


@click.group(cls=FullHelpGroup, help=HELP)
def evidence() -> None:
    pass


@evidence.command("audit")
@REPO_OPTION
@command
def evidence_audit(repo: Path) -> Outcome:
    """Verify the whole log, blobs, checkpoints and witness offline."""
    from gatekeeper.gates import records
    from gatekeeper.work import cosign

    report = cosign.audit_json(repo, records.audit_repo(repo).to_json())
    code = 0 if report["intact"] else EXIT_BLOCKED
    return Outcome(report, code=code, lines=render.audit_lines(report))


@evidence.command("show")
@SEQ
@REPO_OPTION
@command
def evidence_show(seq: int, repo: Path) -> Outcome:
    """Print one entry."""
    from gatekeeper.gates import records

    return Outcome(records.show(repo, seq))


@evidence.command("log")
@REPO_OPTION
@click.option("--kind", help="Only this kind (`transfer` also takes every `transfer.*`).")
@click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
              help="The newest N entries (listed oldest first).")  # fmt: skip
@command
def evidence_log(repo: Path, kind: str | None, limit: int) -> Outcome:
    """Recent entries of the verified log, one line each: verdicts, transfers, runs."""
    from gatekeeper.cli.evidence_log import log_rows

    data = {"entries": [r.to_json() for r in log_rows(repo, kind, limit)]}
    return Outcome(data, lines=log_lines(data))


@evidence.command("blob")
@SEQ
@click.argument("name")
@REPO_OPTION
@command
def evidence_blob(seq: int, name: str, repo: Path) -> Outcome:
    """A stored blob of an entry, raw on stdout: NAME is `<check>.stdout`, `<check>.stderr`,
    a note's attachment name, or the blob's digest (a prefix of 12 hex digits will do)."""
    from gatekeeper.gates import records

    stored, data = records.read_blob(repo, seq, name)
    if "--json" in sys.argv[1:]:
        text = data.decode("utf-8", "replace")
        return Outcome({**stored.to_json(), "text": text})
    if sys.stdout.isatty():  # a check's output is the candidate's text: never raw on a terminal
        text = data.decode("utf-8", "replace")
        return Outcome(
            stored.to_json(), lines=[sanitize(ln, 6 * len(ln) + 1) for ln in text.split("\n")]
        )
    sys.stdout.buffer.write(data)  # the bytes as stored, for piping
    sys.stdout.flush()
    return Outcome(stored.to_json(), lines=[])


@evidence.command("verify")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The public key (PEM, as `oms evidence key` prints it; default: this "
              "state root's).")  # fmt: skip
@click.option("--commit", help="Verify this commit's provenance attestations in "
              "refs/notes/oms instead of a FILE (no $OMS_HOME needed).")  # fmt: skip
@REPO_OPTION
@click.option("--fetch", "fetch_remote", metavar="REMOTE",
              help="With --commit: first fetch refs/notes/oms from REMOTE.")  # fmt: skip
@click.option(
    "--policy-ref",
    metavar="REF",
    help="With --commit: the trusted policy's ref (default: the default branch).",
)
@command
def evidence_verify(file: Path | None, key_file: Path | None, commit: str | None, repo: Path,
                    fetch_remote: str | None, policy_ref: str | None) -> Outcome:  # fmt: skip
    """Verify an exported DSSE envelope offline: signature, payload type, statement; or,
    with --commit, a commit's provenance against the default branch's [trust] signers."""
    if file is not None and commit is None:
        if fetch_remote is not None or policy_ref is not None:
            raise UsageError("--fetch and --policy-ref go with --commit")
        from gatekeeper.gates import records

        data = records.verify_envelope_file(file, key_file).to_json()
        return Outcome(data, code=0 if data["valid"] else EXIT_BLOCKED, lines=verify_lines(data))
    if file is not None or commit is None:
        raise UsageError("give exactly one of FILE and --commit")
    if key_file is not None:
        raise UsageError("--key goes with FILE; --commit reads the trusted policy's signers")
    from gatekeeper.work.provenance_verify import verify_commit

    data = verify_commit(repo, commit, fetch_remote, policy_ref)
    code = 0 if data["verified"] else EXIT_BLOCKED
    return Outcome(data, code=code, lines=verify_commit_lines(data))


@evidence.command("prove")
@SEQ
@REPO_OPTION
@command
def evidence_prove(seq: int, repo: Path) -> Outcome:
    """Inclusion proof of an entry against the latest checkpoint, verified."""
    from gatekeeper.gates import records

    data = records.prove_entry(repo, seq)
    return Outcome(data, code=0 if data["verified"] else EXIT_BLOCKED)


@evidence.command("export")
@SEQ
@click.option("--dsse", is_flag=True, help="A DSSE envelope: the only format, and the default.")
@REPO_OPTION
@command
def evidence_export(seq: int, dsse: bool, repo: Path) -> Outcome:
    """Export an entry as a DSSE envelope holding an in-toto Statement v1."""
    from gatekeeper.gates import records

    env = records.export_entry(repo, seq)
    return Outcome({"envelope": env}, lines=render.export_lines(env))


@evidence.command("attest")
@click.argument("commit")
@REPO_OPTION
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the envelope to FILE (a regular file or a new name) instead of "
              "printing it.")  # fmt: skip
@command
def evidence_attest(commit: str, repo: Path, out: Path | None) -> Outcome:
    """A signed provenance attestation (DSSE) for a commit's READY verdict."""
    from gatekeeper.work import provenance

    if out is not None:
        check_output(out)  # before the scan and the signature, not after
    env = provenance.attest(repo, commit)
    if out is None:
        return Outcome({"envelope": env, "out": None}, lines=render.export_lines(env))
    write_output(out, json.dumps(env, indent=2) + "\n")
    return Outcome({"envelope": env, "out": str(out)}, lines=[sanitize(f"wrote {out}")])


@evidence.command("publish")
@click.argument("commit")
@click.option(
    "--push",
    "remote",
    metavar="REMOTE",
    help="Then merge with REMOTE's refs/notes/oms and push it there (never forced).",
)
@REPO_OPTION
@command
def evidence_publish(commit: str, remote: str | None, repo: Path) -> Outcome:
    """Add a commit's provenance attestation to its note in refs/notes/oms."""
    from gatekeeper.work import provenance

    data = provenance.publish(repo, commit, remote).to_json()
    return Outcome(data, lines=publish_lines(data))


@evidence.command("note")
@click.option("--message", "-m", required=True, help="The note text.")
@click.option(
    "--attach", type=click.Path(dir_okay=False, path_type=Path), help="A file to store as a blob."
)
@REPO_OPTION
@command
def evidence_note(message: str, attach: Path | None, repo: Path) -> Outcome:
    """Append a human note."""
    from gatekeeper.gates import records

    data = records.note(repo, message, attach).to_json()
    return Outcome(data, lines=render.note_lines(data))


@evidence.command("acknowledge")
@SEQ
@REPO_OPTION
@command
def evidence_acknowledge(seq: int, repo: Path) -> Outcome:
    """Accept a FAILED verdict's weakened tests for its commit, once, at the terminal.

    Shows the test changes verdict SEQ found (tests removed, skipped or changed to pass, a
    loosened test configuration) and asks for `yes` at the controlling terminal; the next
    `oms process-result` on that commit accepts exactly those, and records that it did.

    \b
    Example:
      oms process-result --candidate agent/fix      # FAILED: tests weakened …, seq 41
      oms evidence acknowledge 41                   # read, then type yes
      oms process-result --candidate agent/fix      # READY_FOR_HUMAN, acknowledged 42
    """
    from gatekeeper.gates.result.acknowledge import acknowledge

    data = acknowledge(repo, seq, ask=_ask).to_json()
    lines = [f"acknowledged verdict {data['verdict_seq']} ({data['issues']} test change(s)) "
             f"for {data['commit'][:12]} as entry {data['seq']}",
             "next: oms process-result --candidate " + data["commit"][:12]]  # fmt: skip
    return Outcome(data, lines=lines)


def _ask(lines: list[str], question: bytes) -> object:
    from gatekeeper.gates.result.acknowledge import HEADER as ACK_HEADER
    from gatekeeper.gates.transfer.tty import confirm_at_terminal

    return confirm_at_terminal(lines, question, header=ACK_HEADER)


@evidence.command("key")
@REPO_OPTION
@command
def evidence_key(repo: Path) -> Outcome:
    """Print the public signing key and its id."""
    from gatekeeper.gates import records

    data = records.key_info(repo).to_json()
    return Outcome(data, lines=render.key_lines(data))


@evidence.command("repair")
@REPO_OPTION
@command
def evidence_repair(repo: Path) -> Outcome:
    """Move a torn last line to quarantine (never a complete entry) and record it."""
    from gatekeeper.gates import records

    data = records.repair(repo).to_json()
    return Outcome(data, lines=render.repair_lines(data))


def publish_lines(data: Data) -> list[str]:
    done = "added to" if data["added"] else "already in"
    lines = [f"attestation of {data['commit']} {done} its note in {data['ref']} "
             f"({data['bytes']} bytes, sha256 {data['envelope_sha256']})"]  # fmt: skip
    if data["pushed"] is not None:
        lines.append(f"pushed {data['ref']} to {data['pushed']}")
    return [sanitize(line) for line in lines]


@evidence.command("cosign")
@REPO_OPTION
@command
def evidence_cosign(repo: Path) -> Outcome:
    """Ask the policy's cosigners (C2SP tlog-witness) to cosign the latest checkpoint."""
    from gatekeeper.work import cosign

    data = cosign.sync(repo)
    return Outcome(data.to_json(), code=data.exit_code, lines=cosign_lines(data.to_json()))


def cosign_lines(data: Data) -> list[str]:
    rows = [f"{c['cosigner']}: {c['status']}: {c['detail']}" for c in data["cosigners"]]
    rows.append(f"{data['cosigned']} of {len(data['cosigners'])} cosigner(s) cosigned "
                f"{data['log_size']} entries ({data['required']} required)")  # fmt: skip
    return [sanitize(x) for x in rows]


def log_lines(data: Data) -> list[str]:
    rows = [f"{e['seq']:>6} {e['time']} {e['kind']:<18} {e['summary']}" for e in data["entries"]]
    return [sanitize(x) for x in rows] or ["no entries"]


def verify_lines(data: Data) -> list[str]:
    if data["valid"]:
        names = ", ".join(s.get("name", "?") for s in data["subjects"])
        return [sanitize(f"valid: {data['predicate_type']} about {names}")]
    return [sanitize(f"INVALID: {r}") for r in data["reasons"]]


def verify_commit_lines(data: Data) -> list[str]:
    if data["verified"]:
        return [sanitize(f"verified: {data['commit'][:12]} by signer {data['signer']} "
                         f"({data['attestations']} attestation(s))")]  # fmt: skip
    return [sanitize(f"FAIL {c['check']}: {c['detail']}") for c in data["checks"] if not c["ok"]]
