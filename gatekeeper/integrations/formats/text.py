"""Today's two formats: the human lines the command prints, and its `--json` object."""

from __future__ import annotations

import json

from gatekeeper.integrations.formats.report import Report, envelope


def ascii_json(obj: object, indent: int | None = None) -> str:
    """As `--json` writes it: ASCII only, DEL escaped, so no terminal control survives raw."""
    return json.dumps(obj, ensure_ascii=True, indent=indent).replace("\x7f", "\\u007f")


def render(report: Report) -> str:
    """The command's own text lines (already sanitised by its renderer)."""
    if report.text is None:
        return ascii_json(dict(report.data), indent=2)
    return "\n".join(report.text)


def render_json(report: Report) -> str:
    """Exactly the object `--json` prints on stdout."""
    return ascii_json(envelope(report))
