"""detect-secrets 1.5, in-process, with every default plugin inside an explicit settings context.

Without a settings context detect-secrets silently finds nothing; its default
filters include `is_invalid_file`, which drops every finding for a path that
is not on disk (ours are not: we scan bytes from git). Filters are chosen
here: the inline `pragma: allowlist` filter (candidate-written), the lock-file
and swagger filters (a candidate picks its file names) and the two on-disk
file filters are off; the heuristic false-positive filters stay. Network
verification is never configured, so no secret is ever sent anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import version
from typing import Any

from detect_secrets.plugins.base import RegexBasedDetector

from .interface import Finding, ScanItem, ScannerInfo, ScannerUnavailable, fingerprint, redact

KEPT_FILTERS = (
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_likely_id_string",
    "detect_secrets.filters.heuristic.is_templated_secret",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
)
DISABLED_FILTERS = (
    "detect_secrets.filters.common.is_invalid_file",
    "detect_secrets.filters.heuristic.is_non_text_file",
    "detect_secrets.filters.allowlist.is_line_allowlisted",
    "detect_secrets.filters.heuristic.is_lock_file",
    "detect_secrets.filters.heuristic.is_swagger_file",
)


class DetectSecrets:
    @property
    def info(self) -> ScannerInfo:
        return ScannerInfo("detect-secrets", version("detect-secrets"), None)

    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        try:
            return list(self._scan(items))
        except ScannerUnavailable:
            raise
        except Exception as exc:  # any plugin error means "not scanned", never "clean"
            raise ScannerUnavailable(
                f"detect-secrets failed: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None

    def _scan(self, items: Sequence[ScanItem]) -> Iterator[Finding]:
        from detect_secrets.core import scan as ds_scan
        from detect_secrets.core.plugins.util import (
            get_mapping_from_secret_type_to_class,
        )
        from detect_secrets.settings import get_plugins, get_settings, transient_settings

        plugins = [
            {"name": cls.__name__} for cls in get_mapping_from_secret_type_to_class().values()
        ]
        config = {"plugins_used": plugins, "filters_used": [{"path": f} for f in KEPT_FILTERS]}
        with transient_settings(config):
            get_settings().disable_filters(*DISABLED_FILTERS)
            active = set(get_settings().filters)
            if active & set(DISABLED_FILTERS) or not set(KEPT_FILTERS) <= active:
                raise ScannerUnavailable("detect-secrets filters are not as configured")
            if len(get_plugins()) != len(plugins) or not plugins:
                raise ScannerUnavailable("detect-secrets plugins did not load")
            prefilter = _prefilter(get_plugins())
            for item in items:
                lines = [(n, text) for n, text in item.lines if prefilter(item.path, n, text)]
                for secret in ds_scan._process_line_based_plugins(lines, item.path):
                    value = secret.secret_value or ""
                    yield Finding(
                        "detect-secrets",
                        secret.type,
                        item.path,
                        int(secret.line_number),
                        fingerprint(value),
                        redact(value),
                    )


def _prefilter(plugins: Sequence[Any]) -> Callable[[str, int, str], bool]:
    """A cheap exact test for "some plugin could report something on this line".

    detect-secrets spends most of its time dispatching every plugin through its
    dependency injection for every line. A line on which no plugin finds any
    candidate yields no finding whatever the filters say, so only lines that
    pass this test go through the full pipeline, and none is lost. Plain
    regex plugins are tested by their own denylist patterns; the others by
    their own analyze_line, called directly.
    """
    patterns = []
    others = []
    for plugin in plugins:
        if type(plugin).analyze_string is RegexBasedDetector.analyze_string:
            patterns.extend(plugin.denylist)
        else:
            others.append(plugin)
    searches = [p.search for p in patterns]

    def could_match(path: str, number: int, text: str) -> bool:
        line = text.rstrip()
        if not line.strip():
            return False
        if any(search(line) for search in searches):
            return True
        return any(p.analyze_line(filename=path, line=line, line_number=number) for p in others)

    return could_match
