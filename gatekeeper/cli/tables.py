"""Human output on a terminal: rich tables for findings, checks and doctor.

Imported only by the renderers in `render.py`, on a terminal: rich costs start-up time that
`oms --help` must not pay. Every cell is a `Text` made from `sanitize`d strings, and the
console has markup, emoji and highlighting off, so a file name holding `[bold]` or `:x:`
prints as those characters and a terminal control never reaches the terminal raw. Colour
only when the `View` says so (stdout a terminal and `NO_COLOR` unset, https://no-color.org).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from gatekeeper.cli.render import Data, View, check_status, check_tail_lines, doctor_rows
from gatekeeper.text import sanitize

DECISION_STYLE = {"READY_FOR_HUMAN": "bold green", "FAILED": "bold red",
                  "BLOCKED": "bold red", "UNAVAILABLE": "bold yellow"}  # fmt: skip


def draw(renderables: Iterable[RenderableType], view: View) -> list[str]:
    """The lines a terminal of `view.width` columns shows for `renderables`."""
    out = io.StringIO()
    console = Console(
        file=out, force_terminal=True, no_color=not view.color, width=view.width,
        markup=False, emoji=False, highlight=False, soft_wrap=False,
    )  # fmt: skip
    for item in renderables:
        console.print(item)
    return out.getvalue().rstrip("\n").split("\n")


def cell(value: object, style: str = "") -> Text:
    """One table cell from untrusted text: sanitised, never parsed as markup."""
    return Text(sanitize(str(value)), style=style)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


# -------------------------------------------------------------------- scan ---


def findings_table(findings: Sequence[Data]) -> Table:
    table = _table("findings", "where", "rule", "scanner", "preview", "policy")
    for f in findings:
        allowed = cell("allowed", "green") if f["allowed"] else cell("blocks", "bold red")
        table.add_row(cell(f"{f['file']}:{f['line']}"), cell(f["rule"]), cell(f["scanner"]),
                      cell(f["preview"]), allowed)  # fmt: skip
    return table


def scan_lines(data: Data, view: View) -> list[str]:
    parts: list[RenderableType] = [findings_table(data["findings"])] if data["findings"] else []
    style = "bold red" if data["blocking"] else "green"
    parts.append(cell(f"{data['blocking']} finding(s) not allowed by policy", style))
    return draw(parts, view)


# ---------------------------------------------------------- process-result ---


def checks_table(checks: Sequence[Data]) -> Table:
    table = _table("checks", "check", "result", "seconds")
    for c in checks:
        status = check_status(c)
        table.add_row(cell(c["name"]), cell(status, "green" if status == "ok" else "bold red"),
                      cell(f"{c['duration_ms'] / 1000:.1f}"))  # fmt: skip
    return table


def result_lines(
    verdict: Data, view: View, notes: Sequence[str], delivery: Sequence[str]
) -> list[str]:
    """The decision, its reasons, the checks table, then each failed check's output tail."""
    decision = verdict["decision"]
    head = Text(sanitize(decision), style=DECISION_STYLE.get(decision, "bold"))
    head.append(f": {verdict['commit'][:12]} (base {verdict['base'][:12]}), "
                f"evidence seq {verdict['evidence_seq']}")  # fmt: skip
    parts: list[RenderableType] = [head]
    parts += [cell(f"  - {r}") for r in verdict["reasons"]]
    parts += [cell(n) for n in notes]
    checks = verdict.get("checks") or []
    if checks:
        parts.append(checks_table(checks))
    for c in checks:
        if check_status(c) != "ok":
            parts += [cell(line, "dim" if line.startswith("  ") else "bold") for line in
                      check_tail_lines(c)]  # fmt: skip
    parts += [cell(line, "bold red" if "refused" in line else "") for line in delivery]
    return draw(parts, view)


# ------------------------------------------------------------------ doctor ---


def doctor_table(report: Data) -> Table:
    table = _table("oms doctor", "section", "status", "detail")
    for name, ok, detail in doctor_rows(report):
        status = {True: cell("ok", "green"), False: cell("problem", "bold red"),
                  None: cell("info", "dim")}[ok]  # fmt: skip
        table.add_row(cell(name), status, cell(detail))
    return table


def doctor_lines(report: Data, ready: bool, authority: Sequence[str], view: View) -> list[str]:
    """Sections with ok/problem, who could sign, then each problem and the remedies."""
    parts: list[RenderableType] = [doctor_table(report), *(cell(a) for a in authority)]
    parts += [cell(f"warning: {w}", "yellow") for w in report.get("warnings", ())]
    parts += [cell(f"problem: {p}", "bold red") for p in report["problems"]]
    parts += [cell(f"remedy:  {r}", "yellow") for r in report["remedies"]]
    parts.append(cell("ready", "bold green") if ready else cell("NOT READY", "bold red"))
    return draw(parts, view)
