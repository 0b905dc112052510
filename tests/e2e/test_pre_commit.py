"""`.pre-commit-hooks.yaml` with the real `pre-commit` tool in a temporary repository.

The temporary repository's `.pre-commit-config.yaml` names this checkout and its HEAD
commit, as a user's names a tag: pre-commit clones it, installs oms into its own
environment once, then runs the hooks on what is staged. pip reaches only the package
registry. (`pre-commit try-repo` would also take uncommitted changes, but builds the
environment again on every call.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.env import clean_env
from support.repos import git, make_repo
from support.secrets import fake_aws_key

CHECKOUT = Path(__file__).resolve().parents[2]
# The user's pip cache (a cache, not configuration): the hook environment's install of oms
# and its dependencies need not download them again on every run.
PIP_CACHE = os.path.expanduser("~/.cache/pip")
PRE_COMMIT = shutil.which("pre-commit") or str(Path(sys.executable).parent / "pre-commit")

pytestmark = pytest.mark.skipif(
    not (CHECKOUT / ".git").exists(), reason="try-repo needs this checkout to be a git repository"
)


@pytest.fixture(scope="module")
def pc_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One hook environment for the module: pre-commit builds it once per hook repository.
    return tmp_path_factory.mktemp("pre-commit-home")


def head_of_checkout() -> str:
    out = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


CONFIG = """repos:
  - repo: {repo}
    rev: {rev}
    hooks:
      - id: oms-scan-staged
      - id: oms-policy-check
"""


def try_repo(repo: Path, hook: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PRE_COMMIT, "run", hook, "--verbose"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip


def test_the_hooks_refuse_a_staged_secret_and_a_bad_policy(tmp_path: Path, pc_home: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(home, tmp_path / "oms-state")
    env.update(PRE_COMMIT_HOME=str(pc_home), PIP_CACHE_DIR=PIP_CACHE)
    config = CONFIG.format(repo=CHECKOUT, rev=head_of_checkout())
    repo = make_repo(tmp_path / "repo", {"app.py": "X = 1\n", ".pre-commit-config.yaml": config},
                     env=env)  # fmt: skip

    (repo / "clean.py").write_text("Y = 2\n")
    git(repo, "add", "clean.py", env=env)
    ok = try_repo(repo, "oms-scan-staged", env)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    key = fake_aws_key()
    (repo / "settings.py").write_text(f'AWS_KEY = "{key}"\n')
    (repo / "unstaged.py").write_text("Z = 3\n")
    git(repo, "add", "settings.py", env=env)
    refused = try_repo(repo, "oms-scan-staged", env)
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1, out
    assert "settings.py" in out and key not in out

    git(repo, "rm", "-q", "--cached", "settings.py", env=env)
    (repo / "oms.toml").write_text("version = 1\n[sandbx]\nwall_s = 10\n")
    git(repo, "add", "oms.toml", env=env)
    bad = try_repo(repo, "oms-policy-check", env)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert "sandbx" in out and "sandbox" in out  # the did-you-mean

    (repo / "oms.toml").write_text("version = 1\n[sandbox]\nwall_s = 10\n")
    git(repo, "add", "oms.toml", env=env)
    good = try_repo(repo, "oms-policy-check", env)
    assert good.returncode == 0, good.stdout + good.stderr
