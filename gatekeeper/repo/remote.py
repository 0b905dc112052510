"""Remotes: their URLs read as data, and the only transports oms runs (https, ssh, local
paths) for ls-remote, fetch of one ref and push, never prompting, never forced."""

from __future__ import annotations

import re
import subprocess

from gatekeeper.errors import Blocked, UsageError
from gatekeeper.repo.git import SHA_RE, GitError, Repo, git_argv, git_env, run_argv
from gatekeeper.repo.refs import current_branch, valid_refname


class RemoteRefused(Blocked):
    """A remote whose transport oms does not run (only https, ssh and local paths)."""


def repo_config(repo: Repo, key: str) -> str | None:
    """The last value of `key` in the repository's own config file, parsed by git as data
    (`git config --file`: no includes, nothing run)."""
    out = run_argv(["git", "config", "--file", str(repo.common_dir / "config"), "--null", "--get",
                key], git_env(repo), repo.mirror, None, False, "config")  # fmt: skip
    return out.rstrip(b"\0").decode("utf-8", "surrogateescape") if out else None


_SCP = re.compile(r"^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:(?!/)")  # user@host:path (not a port)


def checked_url(url: str) -> str:
    """A remote URL oms will run a transport for: https, ssh, or a local path."""
    if url.startswith(("https://", "ssh://")) or _SCP.match(url):
        host = url.split("://", 1)[-1].split("@", 1)[-1]
        # A host (or user) that looks like an option could reach ssh as one (CVE-2017-1000117).
        if (
            "::" in url.split("/")[0]
            or url.startswith("-")
            or host.startswith("-")
            or ("://" in url and url.split("://", 1)[1].startswith("-"))
        ):
            raise RemoteRefused(f"remote URL refused: {url[:80]!r}")
        return url
    if url.startswith("/") and "::" not in url:
        return url
    if url.startswith("file:///"):
        return url
    raise RemoteRefused(f"oms pushes and fetches only over https, ssh or a local path; "
                        f"refused: {url[:80]!r}")  # fmt: skip


def remote_url(repo: Repo, remote: str, push: bool = False) -> str:
    """A remote's URL from the repository's config as data, or a URL given directly.

    Only the URL is taken: never the remote's receivepack/uploadpack, insteadOf or proxy.
    """
    if not remote or remote.startswith("-") or "\x00" in remote:
        raise UsageError(f"not a valid remote: {remote[:80]!r}")
    if "/" in remote or ":" in remote:
        return checked_url(remote)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", remote):
        raise UsageError(f"not a valid remote: {remote[:80]!r}")
    url = (repo_config(repo, f"remote.{remote}.pushurl") if push else None) or repo_config(
        repo, f"remote.{remote}.url"
    )
    if url is None:
        raise UsageError(f"no remote {remote!r} in this repository")
    return checked_url(url)


LS_REMOTE_TIMEOUT_S = 30


def _transport(repo: Repo, *args: str, ssh: str = "ssh") -> list[str]:
    return ["git", "--git-dir", str(repo.mirror),
            "-c", "protocol.allow=never", "-c", "protocol.https.allow=always",
            "-c", "protocol.ssh.allow=always", "-c", "protocol.file.allow=always",
            "-c", f"core.sshCommand={ssh}", "-c", "credential.helper=", *args]  # fmt: skip


def ls_remote(repo: Repo, url: str, ref: str) -> str | None:
    """The commit `ref` has on the remote itself, or None when it cannot be confirmed.

    A question asked in passing (is this pushed?): it never prompts for a password or a
    host key and gives up after LS_REMOTE_TIMEOUT_S; either way the answer is "unknown".
    """
    argv = _transport(repo, "ls-remote", "--", checked_url(url), ref,
                      ssh="ssh -o BatchMode=yes -o ConnectTimeout=10")  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                              env=git_env(repo), cwd=repo.mirror, check=False,
                              timeout=LS_REMOTE_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    out = proc.stdout if proc.returncode == 0 else b""
    for line in out.split(b"\n"):
        sha, _, name = line.partition(b"\t")
        text = sha.decode("ascii", "replace")
        if name.decode("utf-8", "surrogateescape") == ref and SHA_RE.match(text):
            return text
    return None


def remote_tip(repo: Repo) -> tuple[str, str] | None:
    """(upstream label, commit) of HEAD's upstream branch as confirmed on the remote itself
    (ls-remote through oms' transport rules); None when there is no upstream or it cannot
    be confirmed. A local remote-tracking ref is never taken as proof."""
    branch = current_branch(repo)
    if branch is None:
        return None
    remote = repo_config(repo, f"branch.{branch}.remote")
    merge = repo_config(repo, f"branch.{branch}.merge")
    if not remote or not merge or not merge.startswith("refs/heads/") or not valid_refname(merge):
        return None
    try:
        url = remote_url(repo, remote)
    except (UsageError, Blocked):
        return None
    sha = ls_remote(repo, url, merge)
    if sha is None:
        return None
    probe = subprocess.run(git_argv(repo, "cat-file", "-e", f"{sha}^{{commit}}"),
                           capture_output=True, env=git_env(repo), cwd=repo.mirror,
                           check=False)  # fmt: skip
    if probe.returncode != 0:
        return None
    return f"{remote}/{merge.removeprefix('refs/heads/')}", sha


FETCH_TIMEOUT_S = 120


def fetch_ref(repo: Repo, url: str, ref: str, into: str) -> str | None:
    """The remote's `ref` fetched into `into`, a ref of oms' own repository (forcing it
    overwrites nothing of the user's), the objects into the user's object store (checked:
    fsckObjects); the fetched commit, or None when the remote has no `ref`. Through oms'
    transport rules, never prompting."""
    if not ref.startswith("refs/") or into.startswith("-"):
        raise UsageError(f"not a ref oms fetches: {ref[:80]!r} into {into[:80]!r}")
    env = git_env(repo)
    env["GIT_OBJECT_DIRECTORY"] = str(repo.common_dir / "objects")
    argv = _transport(repo, "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
                      "--no-recurse-submodules", "--", checked_url(url), f"+{ref}:{into}",
                      ssh="ssh -o BatchMode=yes -o ConnectTimeout=10")  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, env=env,
                          cwd=repo.mirror, check=False, timeout=FETCH_TIMEOUT_S)  # fmt: skip
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        if any("couldn't find remote ref" in line for line in err):
            return None
        raise GitError(f"git fetch {url[:80]}: {err[-1][:200] if err else 'failed'}")
    tip = run_argv(git_argv(repo, "rev-parse", "--verify", "-q", f"{into}^{{commit}}"),
                   env, repo.mirror, None, True, "rev-parse")  # fmt: skip
    return tip.decode("ascii").strip()


def push(repo: Repo, remote: str, sha: str, branch: str) -> str:
    """Push exactly `sha` to `branch` on the remote, never forced; returns the URL used."""
    url = remote_url(repo, remote, push=True)
    run_argv(_transport(repo, "push", "--no-verify", "--", url, f"{sha}:refs/heads/{branch}"),
         git_env(repo), repo.mirror, None, True, "push")  # fmt: skip
    return url


def push_ref(repo: Repo, url: str, sha: str, ref: str) -> bool:
    """Push exactly `sha` to `ref` at `url`, never forced: False when the remote refuses it as
    not a fast-forward (another push came first), GitError on any other failure."""
    argv = _transport(repo, "push", "--no-verify", "--porcelain", "--", checked_url(url),
                      f"{sha}:{ref}")  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                          env=git_env(repo), cwd=repo.mirror, check=False)  # fmt: skip
    if proc.returncode == 0:
        return True
    # --porcelain: one `!\t<src>:<dst>\t[rejected] (fetch first|non-fast-forward)` per ref.
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("!\t") and "[rejected]" in line:
            return False
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    raise GitError(f"git push: {(err or ['failed'])[0][:200]}")
