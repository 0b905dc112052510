"""The README's walk: the lines of the `sh` block under "Use it on your repository", which
`test_packaging` runs as printed and `test_doc_commands` leaves to it."""

from __future__ import annotations

import functools
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


@functools.cache
def readme_walk() -> tuple[str, ...]:
    """The block's non-blank lines, as printed (comments and all)."""
    section = README.read_text().split("## Use it on your repository", 1)[1].split("\n## ")[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return tuple(line for line in block.splitlines() if line.strip())
