"""Untrusted text made safe for markdown, HTML and XML: one line of printable text
(gatekeeper.text.sanitize), then escaped for where it goes."""

from __future__ import annotations

import html
import re

from gatekeeper.text import sanitize

# GitHub-flavoured markdown lets a backslash escape any ASCII punctuation; these are the ones
# that can start markup mid-line; `.`, `-`, `+` only matter at the start, escaped there.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~<>&\"'$:])")
_LINE_START = re.compile(r"^(\s*\d*)([.)+-])(?=\s|$)")


def md(text: object, limit: int = 300) -> str:
    """Inline markdown text that renders as itself: no link, emphasis, HTML or table break."""
    out = _MD_SPECIAL.sub(r"\\\1", sanitize(str(text), limit))
    return _LINE_START.sub(r"\1\\\2", out)  # `1.`, `-`, `+` opening a list item


def lines(text: str, limit: int = 400) -> list[str]:
    """A multi-line block as sanitised lines (tabs expanded, controls shown as \\uXXXX)."""
    return [sanitize(line.expandtabs(4), limit) for line in text.splitlines()]


def pre(text: str) -> str:
    """A block for inside <pre>: sanitised lines, HTML-escaped (so `</pre>` cannot close it)."""
    return "\n".join(html.escape(line, quote=False) for line in lines(text))


def html_inline(text: object, limit: int = 300) -> str:
    """One line for inside an inline HTML element in a table cell: escaped, `|` as an
    entity (GitHub splits table cells on `|` even inside <code>)."""
    return html.escape(sanitize(str(text), limit)).replace("|", "&#124;")
