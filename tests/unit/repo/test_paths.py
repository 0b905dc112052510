"""`repo/paths.py`: the one list of secret-looking names and dependency folders.

Each pattern has an example here, so a pattern added without one fails; names match in
any case and, for patterns with a '/', at any depth, but never half a component.
"""

from __future__ import annotations

import pytest

from gatekeeper.repo.paths import SECRET_NAMES, in_dependency_dir, secret_looking

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
