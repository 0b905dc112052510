"""`repo/paths.py`: the one list of secret-looking names and dependency folders.

Each pattern has an example here, so a pattern added without one fails; names match in
any case and, for patterns with a '/', at any depth, but never half a component.
"""

from __future__ import annotations

import fnmatch
import random
import re
from pathlib import PurePosixPath

import pytest

from gatekeeper.repo.paths import DEPENDENCY_DIRS, SECRET_NAMES, in_dependency_dir, secret_looking

# pattern -> a repository path it must catch
EXAMPLES = {
    ".env": ".env", ".env.*": "app/.env.local", "*.env": "prod.env", ".envrc": ".envrc",
    "*.pem": "tls/server.pem", "*.key": "a/b/site.key", "*.p12": "cert.p12", "*.pfx": "c.pfx",
    "*.jks": "store.jks", "*.keystore": "release.keystore", "*.ppk": "putty.ppk",
    "id_rsa*": "id_rsa.pub", "id_dsa*": "id_dsa", "id_ecdsa*": "id_ecdsa",
    "id_ed25519*": "ssh/id_ed25519", "id_*": "id_work",
    ".npmrc": ".npmrc", ".pypirc": ".pypirc", ".netrc": ".netrc", "_netrc": "_netrc",
    ".git-credentials": ".git-credentials", ".pgpass": ".pgpass", ".my.cnf": ".my.cnf",
    ".htpasswd": "web/.htpasswd", ".dockercfg": ".dockercfg",
    ".docker/config.json": "home/.docker/config.json", "*.kdbx": "vault.kdbx",
    "*.kdb": "old.kdb", "credentials": "credentials", "credentials.*": "credentials.yml",
    "credentials*.json": "credentials-prod.json", "*credentials*.json": "gcp-credentials.json",
    "secrets.*": "secrets.yaml", "*.secret": "db.secret", "*.secrets": "ci.secrets",
    "service-account*.json": "service-account-key.json",
    "service_account*.json": "service_account.json", "*-sa-key*.json": "deploy-sa-key.json",
    "gcloud*.json": "gcloud-key.json",
    "application_default_credentials.json": "application_default_credentials.json",
    "kubeconfig": "kubeconfig", "kubeconfig.*": "kubeconfig.prod", "*.kubeconfig": "a.kubeconfig",
    ".kube/config": "ops/.kube/config", ".aws/credentials": ".aws/credentials",
    ".aws/config": "x/.aws/config", ".azure/*": ".azure/accessTokens.json",
    "*.tfstate": "infra/prod.tfstate", "*.tfstate.*": "prod.tfstate.backup",
    "*.tfvars": "vars/prod.tfvars", "*.tfvars.json": "prod.tfvars.json",
}  # fmt: skip


def test_every_pattern_has_an_example() -> None:
    assert set(EXAMPLES) == set(SECRET_NAMES)


@pytest.mark.parametrize("pattern", sorted(EXAMPLES))
def test_each_pattern_catches_its_example_in_any_case(pattern: str) -> None:
    example = EXAMPLES[pattern]
    assert secret_looking(example)
    assert secret_looking(example.upper())  # a case-insensitive filesystem serves it so
    assert secret_looking("deep/down/" + example)


ORDINARY = [
    "", "src/app.py", "README.md", "environment.py", "docs/keys.md", "env.py", "keys/README",
    "a/x.kube/config", "kube/config", "aws/credential.md", "docker/config.json", "netrc.md",
]  # fmt: skip


@pytest.mark.parametrize("path", ORDINARY)
def test_ordinary_paths_are_not_secret_looking(path: str) -> None:
    assert not secret_looking(path)


@pytest.mark.parametrize(
    ("path", "inside"),
    [("node_modules/x/index.js", True), ("a/.venv/lib/x.py", True), ("web/dist/app.js", True),
     ("src/build.py", False), ("node_modules", False), ("vendored/x", False),
     ("docs/target.md", False)],
)  # fmt: skip
def test_a_path_below_a_dependency_folder_is_recognised(path: str, inside: bool) -> None:
    assert in_dependency_dir(path) is inside


# -- the fast matching gives the answers of the plain pathlib formulation ---------------


def pathlib_secret_looking(path: str) -> bool:
    """The reference: every suffix of `PurePosixPath(path).parts`, one match each."""
    parts = PurePosixPath(path).parts
    return any(REFERENCE_RE.match("/".join(parts[i:])) for i in range(len(parts)))


def pathlib_in_dependency_dir(path: str) -> bool:
    return any(part in DEPENDENCY_DIRS for part in PurePosixPath(path).parts[:-1])


REFERENCE_RE = re.compile(
    "|".join(fnmatch.translate(p) for p in SECRET_NAMES), re.IGNORECASE | re.DOTALL
)

ODD = [
    "", ".", "..", "/", "//", "///", "./", "/.env", "//.env", "///.env", "./.env", ".env/",
    "a//.env", "a/./.env", "a/../.env", "../.env", "a/.", "a/..", ".env/.", "x/./y/.netrc",
    "node_modules/", "/node_modules/x", "//node_modules/x", "./node_modules/x", "a/./dist/x",
    "dist", "dist/", "a/dist/", "credentials/x.json", "a/credentials/b/c.json",
    "secrets.d/app.yml", "id_work/readme.md", ".azure/a/b", "x/.azure", ".azure",
    "service-account/x.json", "gcloud/x.json", "a.tfstate.d/x", "x.tfvars.json/y",
    ".kube/config/x", "a/.KUBE/CONFIG", "a/.kube//config", "a/.aws/./credentials",
    "\u212a.pem", "server.\u212aey", "x.\u017fecret", "\u0130d_rsa", "Id_RSA", "ID_\u212aEY",
    "a\n.env", ".env\n", "a/\n/.env", "a\x00b/.env", "a b/.pem", "\udcff.pem", "\udcff/x",
    "caf\u00e9/.npmrc", "\u202e/.env", "VENV/x", "Node_Modules/x", "a/venv", "venv/a/b",
    ".env.", ".env..local", "x.env.y", "a.env/b", "credentials.", "credentials.json.bak",
]  # fmt: skip

FRAGMENTS = [
    "", ".", "..", "/", "//", "a", "src", ".env", "env", ".Env", "id_", "ID_", "rsa", ".pem",
    ".PEM", "credentials", "Credentials", ".json", "-sa-key", "secrets", ".", "kube", ".kube",
    "config", ".aws", ".azure", "node_modules", "dist", "build", "venv", ".venv", "tfstate",
    ".tfvars", "\u212a", "\u017f", "\u0130", "\n", " ", "x", "_netrc", "gcloud", "kubeconfig",
    "service_account", "service-account", ".docker", "site-packages", "\udcff", "caf\u00e9",
]  # fmt: skip


def fuzzed_names(count: int) -> list[str]:
    """Fragments run together or as components, with the odd empty or "." component."""
    rng = random.Random(15)
    names = []
    for _ in range(count):
        name = rng.choice(FRAGMENTS)
        for _ in range(rng.randint(0, 6)):
            name += rng.choice(("", "/", "/", "/")) + rng.choice(FRAGMENTS)
        names.append(name)
    return names


VARIED = sorted({*EXAMPLES.values(), *ORDINARY, *ODD, *fuzzed_names(20_000),
                 *(n.upper() for n in EXAMPLES.values()), *("deep/" + n for n in ODD)})  # fmt: skip


def test_secret_looking_answers_as_the_pathlib_formulation_on_varied_names() -> None:
    differ = [n for n in VARIED if secret_looking(n) != pathlib_secret_looking(n)]
    assert differ == []
    assert sum(map(pathlib_secret_looking, VARIED)) > len(VARIED) // 10  # both answers occur


def test_in_dependency_dir_answers_as_the_pathlib_formulation_on_varied_names() -> None:
    differ = [n for n in VARIED if in_dependency_dir(n) != pathlib_in_dependency_dir(n)]
    assert differ == []
    assert sum(map(pathlib_in_dependency_dir, VARIED)) > len(VARIED) // 20
