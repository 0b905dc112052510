"""The formats other tools read, rendered from a command's `--json` data (the stable
contract): SARIF 2.1.0 for code scanning, markdown for a job summary, JUnit XML for test
reports, and today's text and JSON. Renderers are pure: a `Report` in, a string out."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gatekeeper.integrations.formats import junit, markdown, sarif, text
from gatekeeper.integrations.formats.report import FORMATS, Kind, Report, envelope

__all__ = ["FORMATS", "Kind", "Report", "envelope", "render"]

RENDERERS: Mapping[str, Callable[[Report], str]] = {
    "text": text.render,
    "json": text.render_json,
    "sarif": sarif.render,
    "markdown": markdown.render,
    "junit": junit.render,
}


def render(fmt: str, report: Report) -> str:
    """The report as `fmt` (one of FORMATS), ending with one newline."""
    out = RENDERERS[fmt](report)
    return out if out.endswith("\n") else out + "\n"
