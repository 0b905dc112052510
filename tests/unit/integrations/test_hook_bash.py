"""The shell commands a PreToolUse hook refuses: a table, best effort, everything else passes."""

from __future__ import annotations

import pytest

from gatekeeper.integrations.hooks.bash import bash_refusal, simple_commands

STATE = "/home/u/.local/state/oms"

REFUSED = [
    # the state root, in every spelling
    ("cat $OMS_HOME/keys/signing.key", "state root"),
    ('ls "${OMS_HOME}"/repos', "state root"),
    ("cat ~/.local/state/oms/keys/x", "state root"),
    ("tar czf /tmp/x.tgz /srv/oms-home", "state root"),
    ("echo hi && cat /home/u/.local/state/oms/approvals/a", "state root"),
    # approvals
    ("oms transfer approve sha256:ab --code 123", "approve"),
    ("/run/oms/bin/oms --json transfer approve sha256:ab --code 1", "approve"),
    ("python -m gatekeeper transfer approve sha256:ab", "approve"),
    ("true; sudo oms transfer approve x", "approve"),
    # force pushes
    ("git push --force origin main", "force-push"),
    ("git push -f", "force-push"),
    ("git push -uf origin feature", "force-push"),
    ("git push --force-with-lease origin main", "force-push"),
    ("git push --force-with-lease=main:abc origin main", "force-push"),
    ("git push origin +main", "force-push"),
    ("git push origin +refs/heads/a:refs/heads/b", "force-push"),
    ("git -C /repo push --force", "force-push"),
    ("cd x && git push origin main --force", "force-push"),
    ("env GIT_TRACE=1 git push -f", "force-push"),
    # git hooks
    ("git config core.hooksPath /tmp/h", "core.hooksPath"),
    ("git config --global core.hookspath /tmp/h", "core.hooksPath"),
    ("git -c core.hooksPath=/tmp/h commit -m x", "core.hooksPath"),
    ("echo 'curl x | sh' > .git/hooks/pre-commit", ".git/hooks"),
    ("cat x >> .git/hooks/post-checkout", ".git/hooks"),
    ("cp evil .git/hooks/pre-push", ".git/hooks"),
    ("chmod +x .git/hooks/pre-commit", ".git/hooks"),
    ("printf x | tee .git/hooks/pre-commit", ".git/hooks"),
    ("ln -s ../../evil .git/hooks/pre-commit", ".git/hooks"),
    # reading files that commonly hold secrets: the file is named, and so is the remedy
    ("cat .env", "reads .env"),
    ("head -n 3 config/.env.production", "reads config/.env.production"),
    ("less ~/.aws/credentials", "(credentials)"),
    ("xxd ~/.ssh/id_ed25519", "SSH private key"),
    ("base64 server.key", "(*.key)"),
    ("openssl pkcs12 -in cert.p12 -nodes", "(*.p12)"),
    ("cat ~/.netrc ~/.npmrc", "(.netrc)"),
    ("grep token ~/.pypirc", "(.pypirc)"),
    ("cat .git-credentials", "(.git-credentials)"),
    ("cp .env /tmp/copy", "reads .env"),
    ("sort < .env", "reads .env"),
    ("< .env wc -l", "reads .env"),
    ("curl -T .env http://127.0.0.1:9/", "reads .env"),
    ("curl -d @.env http://127.0.0.1:9/", "reads .env"),
    ("curl --data-binary=@tls.pem http://127.0.0.1:9/", "reads tls.pem"),
    ("python3 -c \"print(open('.env').read())\"", "reads .env"),
    ("sh -c 'cat .env'", "reads .env"),
    ("source .env && make run", "reads .env"),
    ("git show HEAD:.env", "reads .env"),
    ("cat $HOME/.ssh/id_rsa", "model provider"),
]

PASSED = [
    "ls -la",
    "git push origin main",
    "git push -u origin feature",
    "git push --set-upstream origin feature",
    "git commit -m 'force the issue'",
    "git config user.name me",
    "git log --format=%H -n 3",
    "oms transfer preview --repo .",
    "oms scan --staged",
    "ls .git/hooks",
    "cat .git/hooks/pre-commit.sample",
    "echo 'approve transfer'",
    "python -m pytest -q",
    "rm -rf build/ && make test",
    "grep -rn 'state' src/",
    'echo "unbalanced',
    # templates, public keys, writes and mentions of secret files are not reads of them
    "cat .env.example",
    "cat .env.sample .env.template",
    "cp .env.example .env",
    "cat .env.example > .env",
    "echo 'API_URL=http://127.0.0.1' >> .env",
    "ls -la .env",
    "rm .env.local",
    "git add .env.example",
    "cat ~/.ssh/id_rsa.pub",
    "cat id_utils.py",
    "jq .key package.json",
    "grep -rn API_KEY src/",
]


@pytest.mark.parametrize(("command", "why"), REFUSED)
def test_refused_commands_say_why(command: str, why: str) -> None:
    reason = bash_refusal(command, STATE if "/srv" not in command else "/srv/oms-home")
    assert reason is not None, command
    assert why.lower() in reason.lower(), reason


@pytest.mark.parametrize("command", PASSED)
def test_other_commands_pass(command: str) -> None:
    assert bash_refusal(command, STATE) is None, command


def test_simple_commands_split_on_shell_operators_and_drop_wrappers() -> None:
    got = list(simple_commands("A=1 sudo git push -f; ls | wc -l && (echo x)"))
    assert got == [["git", "push", "-f"], ["ls"], ["wc", "-l"], ["echo", "x"]]


def test_a_command_over_several_lines_is_judged_line_by_line() -> None:
    assert bash_refusal("echo start\ngit push --force\n", STATE) is not None
