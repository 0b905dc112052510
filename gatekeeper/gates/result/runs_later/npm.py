"""npm: the lifecycle scripts in `package.json`, and the `.npmrc` settings that pick what an
install runs or where it comes from."""

from __future__ import annotations

from collections.abc import Mapping

from gatekeeper.gates.result.runs_later.common import Said, Unreadable, key_changes, pair, unguarded
from gatekeeper.gates.result.runs_later.documents import json_object

_LIFECYCLE = (
    "preinstall", "install", "postinstall", "prepare", "prepublish", "preprepare",
    "postprepare", "prepack", "postpack", "dependencies", "pnpm:devPreinstall",
)  # fmt: skip


def _scripts(doc: Mapping[str, object]) -> dict[str, object]:
    scripts = doc.get("scripts", {})
    if not isinstance(scripts, dict):
        raise Unreadable
    return scripts


def package_json(base: str | None, cand: str) -> Said:
    b, c = pair(json_object, base, cand)
    cs = _scripts(c)
    try:
        bs = _scripts(b)
    except Unreadable:
        bs = {}
    for key, _ in key_changes(bs, cs):
        if key in _LIFECYCLE:
            yield f"{key} script {'changed' if key in bs else 'added'}", True


def _ini(text: str | None) -> dict[str, str]:
    """npm's ini: `key = value` (a bare key is true), `;`/`#` comments, sections flattened."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or (line.startswith("[") and line.endswith("]")):
            continue
        key, eq, value = line.partition("=")
        key = key.strip().lower().removesuffix("[]")
        out[key] = value.strip().strip("'\"") if eq else "true"
    return out


_NPMRC_AUTO = frozenset({
    "script-shell", "node-options", "onload-script", "init-module", "git", "shell", "node-gyp",
    "pnpmfile", "global-pnpmfile", "dangerously-allow-all-builds",
})  # fmt: skip
# Where installs come from: named, not automatic (a lockfile's integrity still pins them).
_REGISTRY_KEYS = frozenset({"registry", "replace-registry-host", "strict-ssl", "ca", "cafile"})


def registry_key(key: str) -> bool:
    return key in _REGISTRY_KEYS or key.endswith(":registry")


def npmrc(base: str | None, cand: str) -> Said:
    b, c = pair(_ini, base, cand)
    for key, what in key_changes(b, c):
        if key in _NPMRC_AUTO or registry_key(key):
            yield what, key in _NPMRC_AUTO
    yield from unguarded(b, c, "ignore-scripts", "true")
