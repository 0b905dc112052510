"""yarn: `.yarnrc.yml` (berry, read as a small YAML subset) and `.yarnrc` (v1)."""

from __future__ import annotations

import re

from gatekeeper.gates.result.runs_later.common import Said, Unreadable, key_changes, pair, unguarded
from gatekeeper.gates.result.runs_later.npm import registry_key

_YAML_KEY = re.compile(r"""(["']?)([\w.@/-]+)\1[ \t]*:(?:[ \t]+(.*))?""")
_YAML_ODD = re.compile(r"(?:^|[\s\[,{])[&*!]\S")  # anchors, aliases, tags: not read
_YARN_AUTO = frozenset({"yarnPath", "plugins", "injectEnvironmentFiles"})
_YARN_REGISTRY = frozenset({"npmRegistryServer", "npmScopes", "enableStrictSsl", "caFilePath"})


def _yaml_top(text: str | None) -> dict[str, str]:
    """Top-level `key: value` blocks (a key's line and its indented lines, as text); a
    repeated key keeps every block. Anything else is unreadable."""
    if text is None:
        return {}
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for n, raw in enumerate(text.splitlines()):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or (n == 0 and line == "---"):
            continue
        if _YAML_ODD.search(line):
            raise Unreadable
        if line[0] in " \t" or line == "-" or line.startswith("- "):
            if current is None:
                raise Unreadable
            current.append(line)
            continue
        m = _YAML_KEY.fullmatch(line)
        if m is None or m[2] == "<<":
            raise Unreadable
        current = blocks.setdefault(m[2], [])
        current.append(m[3] or "")
    return {k: "\n".join(v) for k, v in blocks.items()}


def yarnrc_yml(base: str | None, cand: str) -> Said:
    b, c = pair(_yaml_top, base, cand)
    for key, what in key_changes(b, c):
        if key in _YARN_AUTO or key in _YARN_REGISTRY:
            yield what, key in _YARN_AUTO
    yield from unguarded(b, c, "enableScripts", "false")


def _yarnrc_v1(text: str | None) -> dict[str, str]:
    """`key value` lines; `--install.ignore-scripts` reads as `ignore-scripts`."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key = key.strip("'\"").lstrip("-").rpartition(".")[2] if "--" in key else key.strip("'\"")
        out[key.lower()] = value.strip().strip("'\"")
    return out


def yarnrc(base: str | None, cand: str) -> Said:
    b, c = pair(_yarnrc_v1, base, cand)
    for key, what in key_changes(b, c):
        if key in ("yarn-path", "script-shell") or registry_key(key):
            yield what, not registry_key(key)
    yield from unguarded(b, c, "ignore-scripts", "true")
