"""`oms scan`: both secret scanners on the repository, paths, the staged change, commits or
standard input; findings grouped by fingerprint for people."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from gatekeeper.cli.formats import formatted
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, View, scan_lines
from gatekeeper.gates import secrets
from gatekeeper.text import sanitize


@click.command("scan")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--staged", is_flag=True, help="Scan what `git commit` would record.")
@click.option("--history", "history", metavar="[RANGE]", is_flag=False, flag_value="HEAD",
              help="Scan commits: all of HEAD's history, REV's, or A..B.")  # fmt: skip
@click.option("--diff", "diff", metavar="BASE..HEAD", help="Scan what a commit range adds.")
@click.option("--stdin", "use_stdin", is_flag=True, help="Scan standard input.")
@click.option("--sarif", type=click.Path(dir_okay=False, path_type=Path), help="Write SARIF 2.1.0.")
@REPO_OPTION
@formatted("scan")
def scan(paths: tuple[Path, ...], staged: bool, history: str | None, diff: str | None,
         use_stdin: bool, sarif: Path | None, repo: Path,
         writes: tuple[Path, ...] = ()) -> Outcome:  # fmt: skip
    """Secrets in the repository's files, PATHs, the staged change, commits or stdin (exit 3)."""
    text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if use_stdin else None
    result = secrets.scan(repo, list(paths), diff, text, sarif, staged=staged, history=history,
                          writes=writes)  # fmt: skip
    data, code = result.to_json(), result.exit_code
    view = View.detect()
    if view.rich:  # a terminal: the findings table, then how to allow them and the skips
        lines = scan_lines(data, view) + [sanitize(x) for x in _advice(data)]
    else:
        lines = grouped_lines(data)
    return Outcome(data, code=code, lines=lines)


REMOVE_AND_ROTATE = ("Remove each secret from the files and rotate it (a secret that was "
                     "committed or sent is known); read it at run time from the environment "
                     "or a secret store.")  # fmt: skip


def _groups(data: Data) -> dict[str, list[Data]]:
    groups: dict[str, list[Data]] = {}
    for f in data["findings"]:
        groups.setdefault(f["fingerprint"], []).append(f)
    return groups


def _advice(data: Data) -> list[str]:
    """What to do with the findings not allowed (remove and rotate first; allowing is for a
    false positive), then what was skipped."""
    groups = _groups(data)
    blocked = [fp for fp, found in groups.items() if not all(f["allowed"] for f in found)]
    lines: list[str] = []
    if blocked:
        lines += [REMOVE_AND_ROTATE,
                  "Only if a finding is a false positive, allow it: add this line under "
                  "[scanners] in oms.toml and commit it (merge it with a list already there; "
                  "a new oms.toml starts with `version = 1`):", *_allow_line(blocked)]  # fmt: skip
    return lines + _skipped(data.get("skipped", []))


def grouped_lines(data: Data) -> list[str]:
    """Findings grouped by fingerprint (rules, scanners, every location), the line that
    allows the ones not allowed, and what was skipped. Never a secret's value."""
    lines: list[str] = []
    for fp, found in _groups(data).items():
        lines += _group(fp, found)
    lines += _advice(data)
    lines.append(f"{data['blocking']} finding(s) not allowed by policy")
    return [sanitize(x) for x in lines]


def _allow_line(fingerprints: list[str]) -> list[str]:
    """`allow_fingerprints = [...]`, one entry a line when long (each line stays short, so
    none is cut when printed)."""
    quoted = [f'"{fp}"' for fp in fingerprints]
    if len(quoted) <= 2:
        return [f"allow_fingerprints = [{', '.join(quoted)}]"]
    return ["allow_fingerprints = [", *(f"    {q}," for q in quoted), "]"]


def _group(fp: str, found: list[Data]) -> list[str]:
    rules = dict.fromkeys(f"{f['rule']} ({f['scanner']})" for f in found)
    mark = " [allowed]" if all(f["allowed"] for f in found) else ""
    head = f"{', '.join(rules)}{mark}: {found[0]['preview']}"
    where = dict.fromkeys(
        f"  {f['file']}:{f['line']}" + (f" (commit {f['commit'][:12]})" if f.get("commit") else "")
        for f in found
    )
    return [head, f"  fingerprint {fp}", *where]


def _skipped(skipped: list[Data]) -> list[str]:
    if not skipped:
        return []
    why = Counter(s["reason"] for s in skipped)
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(why.items()))
    return [f"skipped {len(skipped)} file(s), not scanned: {counts}",
            *(f"  {s['path']}: {s['reason']}" for s in skipped[:20]),
            *(["  … (--json lists them all)"] if len(skipped) > 20 else [])]  # fmt: skip
