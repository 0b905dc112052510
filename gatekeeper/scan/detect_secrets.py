"""detect-secrets 1.5, in-process, with every default plugin inside an explicit settings context.

Without a settings context detect-secrets silently finds nothing. Filters are
chosen here: the inline `pragma: allowlist` filter (candidate-written) is off,
and so are the file-name filters — lock-file and swagger (a candidate picks its
file names), `is_invalid_file` and `is_non_text_file` (in a file scan they drop
every finding for a path that is not on disk, and ours are bytes from git).
oms drives the per-line pipeline, which does not consult file-name filters
today; they are off anyway so that a change there cannot silently drop
findings. The heuristic false-positive filters stay, with oms' own (`benign.py`):
hash fields, placeholder credentials and base64 of prose, judged by value and key,
never by file name. Network verification is never configured, so no secret is ever sent anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from typing import Any

from detect_secrets.core import scan as ds_scan
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.settings import get_plugins, get_settings, transient_settings

from gatekeeper.scan.interface import (
    Finding,
    ScanItem,
    ScannerInfo,
    ScannerUnavailable,
    fingerprint,
)
from gatekeeper.scan.prefilter import Prefilter
from gatekeeper.scan.redact import preview

KEPT_FILTERS = (
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_likely_id_string",
    "detect_secrets.filters.heuristic.is_templated_secret",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
    # oms' own, by the exact shape of a value (scan/benign.py): hash fields, placeholders
    "gatekeeper.scan.benign.is_hash_field",
    "gatekeeper.scan.benign.is_placeholder_credential",
    "gatekeeper.scan.benign.is_encoded_prose",
)
# Gitleaks' own private-key pattern, so that a PEM block gets the same fingerprint from both.
PEM_BLOCK = re.compile(
    r"(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S-]{64,}?KEY(?: BLOCK)?-----"
)
PEM_MAX_LINES = 400
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
        return [f for _, f in self.scan_by_item(items)]

    def scan_by_item(self, items: Sequence[ScanItem]) -> list[tuple[int, Finding]]:
        """[(item index, finding)]: each item is scanned alone."""
        try:
            return list(self._scan(items))
        except ScannerUnavailable:
            raise
        except Exception as exc:  # any plugin error means "not scanned", never "clean"
            raise ScannerUnavailable(
                f"detect-secrets failed: {type(exc).__name__}: {str(exc)[:200]}"
            ) from None

    def _scan(self, items: Sequence[ScanItem]) -> Iterator[tuple[int, Finding]]:
        classes: list[type[Any]] = list(get_mapping_from_secret_type_to_class().values())
        plugins = [{"name": cls.__name__} for cls in classes]
        config = {"plugins_used": plugins, "filters_used": [{"path": f} for f in KEPT_FILTERS]}
        with transient_settings(config):
            get_settings().disable_filters(*DISABLED_FILTERS)
            active = set(get_settings().filters)
            if active & set(DISABLED_FILTERS) or not set(KEPT_FILTERS) <= active:
                raise ScannerUnavailable("detect-secrets filters are not as configured")
            if len(get_plugins()) != len(plugins) or not plugins:
                raise ScannerUnavailable("detect-secrets plugins did not load")
            prefilter = Prefilter(get_plugins())
            by_type = {p.secret_type: p for p in get_plugins()}
            for k, item in enumerate(items):
                lines = prefilter(item.path, item.lines)
                position: dict[int, int] | None = None
                for secret in ds_scan._process_line_based_plugins(lines, item.path):
                    if position is None:
                        position = {n: i for i, (n, _) in enumerate(item.lines)}
                    value = _whole_secret(
                        by_type.get(secret.type),
                        secret.secret_value or "",
                        item.lines,
                        position.get(int(secret.line_number), -1),
                    )
                    number = int(secret.line_number)
                    yield (
                        k,
                        Finding(
                            "detect-secrets",
                            secret.type,
                            item.path,
                            number,
                            fingerprint(value),
                            preview(value),
                            # a PEM block spans lines: the change may add only its body
                            end_line=number + value.count("\n") if "\n" in value else None,
                        ),
                    )


def _whole_secret(plugin: Any, value: str, lines: Sequence[tuple[int, str]], index: int) -> str:
    """The secret itself, where detect-secrets reports only a piece of it.

    Some detect-secrets patterns capture a type prefix rather than the secret (GitHub:
    "ghp", GitLab: "glpat"), and its private-key plugin reports the constant words of
    the PEM header. Fingerprinting those would give every such secret the same
    fingerprint, so that allowing one would allow them all, and would never match the
    Gitleaks fingerprint of the same secret. For such a piece this returns the whole match
    (or the whole PEM block, as Gitleaks' pattern delimits it).
    """
    if plugin is None or not 0 <= index < len(lines):
        return value
    line = lines[index][1]
    if isinstance(plugin, PrivateKeyDetector):
        text = "\n".join(t for _, t in lines[index : index + PEM_MAX_LINES])
        block = PEM_BLOCK.search(text)
        if block is not None and block.start() < len(line):
            return block.group(0)
        return "\n".join(t for _, t in lines[index : index + 2])
    if type(plugin).analyze_string is RegexBasedDetector.analyze_string:
        for pattern in plugin.denylist:
            for match in pattern.finditer(line.rstrip()):
                whole = match.group(0)
                if value != whole and whole.startswith(value) and value in match.groups():
                    return str(whole)
    return value
