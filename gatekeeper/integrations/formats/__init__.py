"""The formats other tools read, rendered from a command's `--json` data (the stable
contract): SARIF 2.1.0 for code scanning, markdown for a job summary, JUnit XML for test
reports, and today's text and JSON. Renderers are pure: a `Report` in, a string out."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import cast

from gatekeeper.integrations.formats.report import FORMATS, Kind, Report, envelope

__all__ = ["FORMATS", "Kind", "Report", "envelope", "render"]

# Each format's module and function, imported when that format is asked for: `oms scan`
# prints text or JSON and never pays for SARIF, JUnit (xml.etree) or markdown.
RENDERERS: Mapping[str, tuple[str, str]] = {
    "text": ("text", "render"),
    "json": ("text", "render_json"),
    "sarif": ("sarif", "render"),
    "markdown": ("markdown", "render"),
    "junit": ("junit", "render"),
}


def render(fmt: str, report: Report) -> str:
    """The report as `fmt` (one of FORMATS), ending with one newline."""
    module, name = RENDERERS[fmt]
    fn = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    out = cast(Callable[[Report], str], fn)(report)
    return out if out.endswith("\n") else out + "\n"
