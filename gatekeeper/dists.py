"""An installed distribution's version, read from its `.dist-info` directory's name: what
`importlib.metadata.version` answers, without its imports (e-mail parsing, ~50 ms) on a path
a user waits for on every tool call (a hook). Anything unclear falls back to
importlib.metadata, so the answer is the same either way."""

from __future__ import annotations

import os
import re
import sys

SUFFIX = ".dist-info"


def dist_version(name: str) -> str | None:
    """The version of the installed distribution `name`, or None when it is not installed."""
    prefix = re.sub(r"[-_.]+", "_", name).lower() + "-"
    for entry in sys.path:  # importlib.metadata's own search order
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if n.lower().startswith(prefix) and n.endswith(SUFFIX)]
        if len(found) == 1 and "-" not in found[0][len(prefix) : -len(SUFFIX)]:
            return found[0][len(prefix) : -len(SUFFIX)]
        if found:
            break  # two, or a name oms does not read: ask importlib.metadata
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
