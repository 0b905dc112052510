"""`--format text|json|sarif|markdown|junit` and `--output FILE` for a command that
returns an `Outcome` (today `oms scan` and `oms process-result`).

`formatted(kind)` stands in for `render.command`: it wraps it, so refusals, exit codes and
`--json` behave exactly as before. `--format` and `--output` pair up in order and may be
given more than once (one run, several files: the GitHub Action writes SARIF and markdown
from one gate run). A `--format` without its `--output` (at most one, the last) goes to
stdout; `--output` without a `--format` gets `json` with `--json`, else `text`. With
every format in a file, stdout keeps the human text (the JSON object with `--json`).
`--json` is `--format json` on stdout: `--json` with another stdout format is a usage
error. The exit code is the command's, whatever the format.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.render import Outcome, Refused, command, emit_error, showing_refusals
from gatekeeper.errors import OmsError, UsageError
from gatekeeper.integrations.formats import FORMATS, Kind, Report, render
from gatekeeper.outfile import STDOUT, check_output, write_output
from gatekeeper.repo.git import open_repo


@dataclass(frozen=True)
class Plan:
    """Where each format goes: files (format, path) and the one format stdout gets."""

    files: tuple[tuple[str, Path], ...]
    stdout: str


def plan(formats: Sequence[str], outputs: Sequence[str], as_json: bool) -> Plan:
    """Pair `--format`s with `--output`s; UsageError on what cannot be paired."""
    default = "json" if as_json else "text"
    pairs = [(formats[i] if i < len(formats) else default, out) for i, out in enumerate(outputs)]
    rest = list(formats[len(outputs) :])
    to_stdout = [f for f, out in pairs if out == STDOUT] + rest
    if len(to_stdout) > 1:
        raise UsageError("give an --output FILE for each --format but one (stdout takes one)")
    stdout = to_stdout[0] if to_stdout else default
    if as_json and stdout != "json":
        raise UsageError(f"--json is --format json: it cannot go with --format {stdout}")
    return Plan(tuple((f, Path(out)) for f, out in pairs if out != STDOUT), stdout)


def _root(repo: Any) -> Path | None:
    """The repository's top for repository-relative SARIF URIs; the directory itself when
    it is not a repository (a scan of plain paths)."""
    if repo is None:
        return None
    try:
        return open_repo(Path(repo)).top
    except OmsError:  # not a repository: names stay as the scan gave them
        return Path(repo).absolute()


def _write(kind: Kind, fn: Callable[..., Outcome]) -> Callable[..., Outcome]:
    """Run the command, write each file, and give `render.command` what stdout gets."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Outcome:
        formats, outputs = kwargs.pop("formats"), kwargs.pop("outputs")
        as_json = bool(click.get_current_context().params.get("as_json"))
        where = plan(formats, outputs, as_json)
        for _, path in where.files:  # refused before a long gate runs, and again at writing
            check_output(path)
        root, cwd = _root(kwargs.get("repo")), Path.cwd() if kind == "scan" else None
        if kind == "scan":  # the files written here are not the user's code to scan
            kwargs["writes"] = tuple(path for _, path in where.files)
        try:
            outcome = fn(*args, **kwargs)
        except OmsError as exc:
            # A gate that recorded its verdict and then refused (UNAVAILABLE, or BLOCKED by a
            # refusal) writes its files too: a job summary says what happened on every outcome.
            if exc.data is not None and "decision" in exc.data:
                error = {"kind": exc.kind, "message": exc.message}
                report = Report(kind, {**exc.data, "error": error}, exc.exit_code, None, root)
                for fmt, path in where.files:
                    write_output(path, render(fmt, report))
            raise
        report = Report(kind, outcome.data, outcome.code, outcome.lines, root, cwd)
        for fmt, path in where.files:
            write_output(path, render(fmt, report))
        if where.stdout in ("text", "json"):  # render.command prints these as it always has
            return outcome
        return Outcome(outcome.data, outcome.code, [render(where.stdout, report).rstrip("\n")])

    return inner


def formatted(
    kind: Kind, refused: Refused | None = None
) -> Callable[[Callable[..., Outcome]], Callable[..., None]]:
    """`render.command` with `--format` and `--output` (see the module docstring);
    `refused`: how a refusal's data is shown in human output (`showing_refusals`)."""

    def decorate(fn: Callable[..., Outcome]) -> Callable[..., None]:
        wrap = command if refused is None else showing_refusals(refused)
        wrapped = wrap(_write(kind, fn))

        @click.option(
            "--format",
            "formats",
            multiple=True,
            type=click.Choice(FORMATS),
            help="Output format (repeatable, paired with --output in order).",
        )
        @click.option("--output", "outputs", multiple=True, metavar="FILE",
                      help="Write the paired --format to FILE atomically ('-': stdout); "
                      "never onto a symlink, device or directory.")  # fmt: skip
        @functools.wraps(wrapped)
        def outer(*args: Any, **kwargs: Any) -> None:
            if "json" in kwargs["formats"] and not kwargs.get("as_json"):
                _fold_json(kwargs)
            wrapped(*args, **kwargs)

        return outer

    return decorate


def _fold_json(kwargs: dict[str, Any]) -> None:
    """`--format json` for stdout is `--json`, so that a refusal is one JSON object too."""
    try:
        where = plan(kwargs["formats"], kwargs["outputs"], as_json=False)
    except UsageError as exc:
        emit_error(False, exc.exit_code, exc.kind, exc.message)
        sys.exit(exc.exit_code)
    if where.stdout == "json":
        kwargs["as_json"] = True
