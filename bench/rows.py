"""Issue 33's table: each bench records its rows here, and `bench/run.py` prints them together.

A row is what a user waits for, measured as a ratio to an anchor taken in the same run, beside
its goal. Benches call `record(...)` once per row; when `bench/run.py` runs them it sets
`OMS_BENCH_ROWS` to a file, reads the rows back and prints the table at the end. A bench run
on its own still prints its own lines, and `record` then only prints the row.
"""

from __future__ import annotations

import json
import os


def record(row: str, value: str, anchor: str, ratio: float | None, goal: str, met: bool) -> None:
    """One row of the table: `ratio` is value ÷ anchor (None where the goal is a count)."""
    entry = {"row": row, "value": value, "anchor": anchor, "ratio": ratio, "goal": goal,
             "met": met}  # fmt: skip
    path = os.environ.get("OMS_BENCH_ROWS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
    else:
        print(format_row(entry))


def format_row(entry: dict[str, object]) -> str:
    ratio = entry.get("ratio")
    shown = f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-"
    verdict = "MET" if entry.get("met") else "NOT MET"
    return (f"| {entry['row']} | {entry['value']} | {entry['anchor']} | {shown} | "
            f"{entry['goal']} | {verdict} |")  # fmt: skip


def table(path: str) -> list[str]:
    """The recorded rows as a Markdown table, in the order they were measured."""
    try:
        with open(path, encoding="utf-8") as fh:
            entries = [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        entries = []
    head = "| what a user waits for | now | anchor | ratio | goal | |"
    lines = [head, "|---|---|---|---|---|---|"]
    return lines + [format_row(e) for e in entries]
