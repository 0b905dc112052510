"""`oms cache show|clear`: the content-addressed scan-result cache under `$OMS_HOME`."""

from __future__ import annotations

import click

from gatekeeper.cli.options import FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.scan.cache import ScanCache, Stats, cache_dir, enabled, max_bytes
from gatekeeper.text import sanitize


@click.group(cls=FullHelpGroup)
def cache() -> None:
    """The scan-result cache: findings stored by content, so unchanged files are not rescanned."""


def _empty() -> Stats:
    return Stats(str(cache_dir() / "scan.db"), 0, 0, max_bytes())


@cache.command("show")
@command
def cache_show() -> Outcome:
    """Where the cache is, how many entries it holds and its size bound."""
    found = ScanCache.existing()
    data = {**(found.stats() if found else _empty()).to_json(), "enabled": enabled()}
    state = "on" if data["enabled"] else "off (OMS_SCAN_CACHE=off)"
    return Outcome(data, lines=[
        f"scan cache: {state}, {sanitize(str(data['path']))}",
        f"{data['entries']} entries, {data['bytes']} of at most {data['max_bytes']} bytes",
    ])  # fmt: skip


@cache.command("clear")
@command
def cache_clear() -> Outcome:
    """Remove every stored scan result; the next scans run both scanners again."""
    found = ScanCache.existing()
    data = (found.clear() if found else _empty()).to_json()
    line = f"cleared {data['entries']} entries ({data['bytes']} bytes)"
    cleared = {"cleared": data["entries"], "bytes": data["bytes"], "path": data["path"]}
    return Outcome(cleared, lines=[line])
