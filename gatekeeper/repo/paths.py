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

_SECRET_RE = re.compile(
    "|".join(fnmatch.translate(p) for p in SECRET_NAMES), re.IGNORECASE | re.DOTALL
)


def secret_looking(path: str) -> bool:
    """A name (or, for patterns with '/', a path at any depth) that usually holds credentials."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    # Every suffix of the path: "a/.kube/config" matches ".kube/config"; the name alone
    # matches the patterns without a '/'.
    return any(_SECRET_RE.match("/".join(parts[i:])) for i in range(len(parts)))


def in_dependency_dir(path: str) -> bool:
    """A path below a dependency or build folder."""
    return any(part in DEPENDENCY_DIRS for part in PurePosixPath(path).parts[:-1])
