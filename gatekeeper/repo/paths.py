"""Path names oms treats specially, in one place: secret-looking names and dependency folders.

The transfer selection, the MCP repo gateway and anything else that serves files
import these; none keeps a list of its own. Names are matched case-insensitively
(a case-insensitive filesystem serves `.NETRC` as `.netrc`).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import PurePosixPath

DEPENDENCY_DIRS = frozenset({
    "node_modules", "vendor", ".venv", "venv", "env", "__pycache__", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", "dist", "build", "target", ".gradle",
    ".next", ".nuxt", "bower_components", ".terraform", ".cache", "site-packages", ".eggs",
})  # fmt: skip

# Names (or, with a '/', repo-relative paths) that usually hold credentials.
SECRET_NAMES = (
    # environment files and keys
    ".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks",
    "*.keystore", "*.ppk", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
    "id_*",
    # client credentials of tools and services
    ".npmrc", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".pgpass", ".my.cnf",
    ".htpasswd", ".dockercfg", ".docker/config.json", "*.kdbx", "*.kdb",
    "credentials", "credentials.*", "credentials*.json", "*credentials*.json",
    "secrets.*", "*.secret", "*.secrets",
    # cloud service-account keys and kubeconfigs
    "service-account*.json", "service_account*.json", "*-sa-key*.json", "gcloud*.json",
    "application_default_credentials.json", "kubeconfig", "kubeconfig.*", "*.kubeconfig",
    ".kube/config", ".aws/credentials", ".aws/config", ".azure/*",
    # infrastructure state and variables
    "*.tfstate", "*.tfstate.*", "*.tfvars", "*.tfvars.json",
)  # fmt: skip

_FLAGS = re.IGNORECASE | re.DOTALL
_SECRET_RE = re.compile("|".join(fnmatch.translate(p) for p in SECRET_NAMES), _FLAGS)

# The same patterns, tried against every suffix of whole components of a name in a few
# regex calls instead of one call per suffix (for a name whose components are all
# non-empty, a suffix of whole components is what follows any '/', or the whole name).


def _shape(pattern: str) -> str:
    """How a pattern is tried against every suffix at once. `end`: `*LITERAL`, which
    some suffix matches exactly when the name ends with LITERAL; `whole`: another
    pattern opening with '*', which takes in any prefix, so the whole name is the one
    suffix to try; `lead`: a literal first character, tried after each '/' followed by
    a character that can start it; `any`: the rest, tried after each '/'."""
    head, rest = pattern[:1], pattern[1:]
    if head == "*":
        return "whole" if any(c in rest for c in "*?[") else "end"
    return "any" if head in "?[" else "lead"


def _either(patterns: list[str]) -> str:
    return "|".join(patterns) or "(?!)"  # an empty list matches nothing


def _globs(shape: str) -> str:
    return _either([fnmatch.translate(p) for p in SECRET_NAMES if _shape(p) == shape])


_ENDINGS = [re.escape(p[1:]) for p in SECRET_NAMES if _shape(p) == "end"]
_LEADS = re.escape("".join(sorted({p[0] for p in SECRET_NAMES if _shape(p) == "lead"})))
_END_RE = re.compile(f"(?:{_either(_ENDINGS)})\\Z", _FLAGS)
_WHOLE_RE = re.compile(_globs("whole"), _FLAGS)
_SUFFIX_RE = re.compile(f"(?:.*/)?(?:{_globs('lead')}|{_globs('any')})", _FLAGS)
# For an ASCII name, a look at the first character skips the patterns that cannot start
# there (case-insensitively, ASCII letters fold only to ASCII letters).
_ASCII_SUFFIX_RE = re.compile(
    f"(?:.*/)?(?:(?=[{_LEADS}])(?:{_globs('lead')})|{_globs('any')})", _FLAGS
)


def _plain(path: str) -> list[str] | None:
    """The components of a name with no empty and no "." component (no leading, doubled
    or trailing '/'): exactly what `PurePosixPath(path).parts` gives, without building a
    path object. None for any other spelling, which is left to pathlib."""
    parts = path.split("/")
    return None if "" in parts or "." in parts else parts


def secret_looking(path: str) -> bool:
    """A name (or, for patterns with '/', a path at any depth) that usually holds credentials."""
    if _plain(path) is not None:
        suffixes = _ASCII_SUFFIX_RE if path.isascii() else _SUFFIX_RE
        return bool(_END_RE.search(path) or _WHOLE_RE.match(path) or suffixes.match(path))
    parts = PurePosixPath(path).parts
    # Every suffix of the path: "a/.kube/config" matches ".kube/config"; the name alone
    # matches the patterns without a '/'.
    return any(_SECRET_RE.match("/".join(parts[i:])) for i in range(len(parts)))


def in_dependency_dir(path: str) -> bool:
    """A path below a dependency or build folder."""
    parts = _plain(path)
    dirs = PurePosixPath(path).parts[:-1] if parts is None else parts[:-1]
    return not DEPENDENCY_DIRS.isdisjoint(dirs)
