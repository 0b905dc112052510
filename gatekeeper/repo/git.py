"""git for oms: run in oms' own bare repository, never under the repository's configuration.

The user's repository is the agent's ground: its `.git/config` can name programs
(`core.fsmonitor`, `gpg.program`, filter drivers, `core.sshCommand`,
`remote.*.receivepack`), its refs can replace objects (`refs/replace/`), its
attributes can re-encode or hide content. So oms never runs git *in* it. Each
repository gets a bare repository of oms' own, `$OMS_HOME/repos/<id>/git`, whose
`objects/info/alternates` names the user's object store and whose config oms
writes; every git call runs there, with no system or global config, no replace
objects, literal pathspecs and fixed encodings. Refs, HEAD and the few config
values oms needs (a remote's URL, a branch's upstream) are read from the user's
repository as data. Commands that read the worktree and index (`ls-files`) run
with oms' git dir, the user's worktree and the user's index file, read as data.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evidence import repo_id_for, state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import Blocked, UsageError
from policy import POLICY_FILE, LoadedPolicy, PolicyError, default_policy, parse_policy

_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_HEX_PREFIX = re.compile(r"^[0-9a-fA-F]{4,64}$")
_SUFFIX = re.compile(r"^(?:[~^][0-9]{0,6})*$")
_UNSAFE_PATH = re.compile(r"[\x00-\x1f\x7f]")
_MAX_SYMREF_DEPTH = 5
# git's own order for a short name (refs.c, ref_rev_parse_rules), HEAD aside.
_DWIM = ("{}", "refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}",
         "refs/remotes/{}/HEAD")  # fmt: skip
DEFAULT_BRANCH_FILE = "default-branch"


class GitError(UsageError):
    """git refused: not a repository, a ref that does not resolve, and the like."""


class RemoteRefused(Blocked):
    """A remote whose transport oms does not run (only https, ssh and local paths)."""


@dataclass(frozen=True)
class Repo:
    top: Path  # the worktree
    common_dir: Path  # the user's git common dir (objects, refs, config)
    repo_id: str
    git_dir: Path  # this worktree's own git dir (HEAD, index)

    @property
    def mirror(self) -> Path:
        """oms' own bare repository for this repository, made on first use (so that a
        command refused before any git runs leaves nothing in the state root)."""
        path = state_root() / "repos" / self.repo_id / "git"
        if path not in _MIRRORS_READY:
            _ensure_mirror(self.repo_id, self.common_dir)
            _MIRRORS_READY.add(path)
        return path


# -- finding the repository, as data --------------------------------------------------------


def _gitfile_target(dotgit: Path) -> Path:
    try:
        text = dotgit.read_bytes()[:4096].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise UsageError(f"{dotgit} is not a readable gitdir file") from None
    if not text.startswith("gitdir: "):
        raise UsageError(f"{dotgit} is not a gitdir file")
    target = Path(text[len("gitdir: ") :].strip("\n"))
    return target if target.is_absolute() else dotgit.parent / target


def _discover(path: Path) -> tuple[Path, Path, Path]:
    """(top, git dir, common dir) of the worktree containing `path`, found by reading files."""
    p = Path(os.path.realpath(path))
    while True:
        dotgit = p / ".git"
        if os.path.lexists(dotgit):
            git_dir = Path(os.path.realpath(dotgit if dotgit.is_dir() else _gitfile_target(dotgit)))
            break
        if p.parent == p:
            raise UsageError(f"{path} is not inside a git repository")
        p = p.parent
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        raw = commondir.read_text(errors="replace").strip("\n")
        common = Path(os.path.realpath(git_dir / raw))
    if not (git_dir / "HEAD").is_file() or not (common / "objects").is_dir():
        raise UsageError(f"{p} has a .git that is not a usable git repository")
    return p, git_dir, common


def _refuse_unsafe(repo_top: Path, common: Path) -> None:
    for p in (repo_top, common):
        if _UNSAFE_PATH.search(str(p)):
            raise UsageError("the repository's path contains a newline or control character; "
                             "oms refuses to work on it")  # fmt: skip
    shallow = common / "shallow"
    if shallow.exists() and shallow.stat().st_size > 0:
        raise UsageError("this repository is shallow: oms needs the whole history to judge a "
                         "change (run `git fetch --unshallow`)")  # fmt: skip
    if (common / "reftable").exists():
        raise UsageError("this repository stores refs as a reftable, which oms cannot read")


_MIRROR_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = true
\tfsmonitor = false
\thooksPath = /dev/null
\tpager = cat
\tattributesFile = {empty}
\texcludesFile = {empty}
\tcommitGraph = false
\tmultiPackIndex = false
\tquotePath = false
\tbigFileThreshold = 4g
\tautocrlf = false
\tsafecrlf = false
\tuntrackedCache = false
\tsplitIndex = false
\tlogAllRefUpdates = false
\tsshCommand = ssh
\taskPass =
[diff]
\texternal =
\trenames = false
\tnoprefix = false
\tmnemonicPrefix = false
\trelative = false
\tsubmodule = short
[log]
\tshowSignature = false
\tdecorate = false
[gpg]
\tprogram = /dev/null
[i18n]
\tcommitEncoding = UTF-8
\tlogOutputEncoding = UTF-8
[protocol]
\tallow = never
[color]
\tui = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[advice]
\tdetachedHead = false
[fetch]
\tfsckObjects = true
[transfer]
\tfsckObjects = true
"""


def _ensure_mirror(repo_id: str, common: Path) -> Path:
    """oms' bare repository for `common`, created or corrected to oms' exact config."""
    home = state_root() / "repos" / repo_id
    ensure_private_dir(home)
    mirror = home / "git"
    for sub in ("", "objects", "objects/info", "refs", "refs/heads", "refs/tags", "info"):
        ensure_private_dir(mirror / sub if sub else mirror)
    wanted = {
        mirror / "HEAD": b"ref: refs/heads/oms\n",
        mirror / "config": _MIRROR_CONFIG.format(empty=mirror / "info" / "empty").encode(),
        mirror / "objects" / "info" / "alternates": os.fsencode(common / "objects") + b"\n",
        mirror / "info" / "empty": b"",
    }
    for path, data in wanted.items():
        try:
            same = path.read_bytes() == data and not path.is_symlink()
        except OSError:
            same = False
        if not same:
            atomic_write(path, data, durable=False)
    # Nothing of the repository's may stand in oms' repository.
    for stray in ("shallow", "info/grafts", "commondir", "packed-refs"):
        if os.path.lexists(mirror / stray):
            os.unlink(mirror / stray)
    return mirror


_REPOS: dict[tuple[str, str], Repo] = {}
_MIRRORS_READY: set[Path] = set()


def open_repo(path: Path) -> Repo:
    """The repository containing `path`, and oms' own repository for it."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory")
    top, git_dir, common = _discover(path)
    key = (str(state_root()), str(top))
    known = _REPOS.get(key)
    if known is not None and known.git_dir == git_dir and known.common_dir == common:
        return known
    _refuse_unsafe(top, common)
    repo_id = repo_id_for(common)
    repo = Repo(top, common, repo_id, git_dir)
    _REPOS[key] = repo
    return repo


def _repo(top: Path | Repo) -> Repo:
    if isinstance(top, Repo):
        return top
    known = _REPOS.get((str(state_root()), str(Path(os.path.realpath(top)))))
    return known if known is not None else open_repo(top)


# -- running git ------------------------------------------------------------------------------


def git_env(repo: Repo | None = None) -> dict[str, str]:
    """The environment of every git oms runs: nothing of the user's git set-up."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "XDG_CONFIG")) and k != "EMAIL"}  # fmt: skip
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        # Absent, so read as empty; oms' own directory, so nobody else's file.
        GIT_CONFIG_GLOBAL=str((repo.mirror if repo else state_root()) / "no-global-config"),
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_LITERAL_PATHSPECS="1",
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_PROTOCOL_FROM_USER="0",
        LC_ALL="C",
    )
    return env


def git_argv(top: Path | Repo, *args: str) -> list[str]:
    repo = _repo(top)
    return ["git", "--git-dir", str(repo.mirror), "--no-replace-objects",
            "--literal-pathspecs", *args]  # fmt: skip


def _run(argv: list[str], env: dict[str, str], cwd: Path, input: bytes | None,
         check: bool, what: str) -> bytes:  # fmt: skip
    proc = subprocess.run(argv, input=input, capture_output=True, env=env, cwd=cwd, check=False)
    if check and proc.returncode != 0:
        first = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = first[0] if first else f"exit {proc.returncode}"
        raise GitError(f"git {what}: {reason}")
    return proc.stdout


def git(top: Path | Repo, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """git ARGS in oms' repository for `top` (objects only); stdout bytes. GitError on failure."""
    repo = _repo(top)
    return _run(git_argv(repo, *args), git_env(repo), repo.mirror, input, check, args[0])


def worktree_git(repo: Repo, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """git reading `repo`'s worktree and index as data (ls-files and the like), never its config.

    The user's `info/exclude` is honoured as data beside the worktree's `.gitignore` files.
    """
    extra: list[str] = []
    exclude = repo.common_dir / "info" / "exclude"
    if "--exclude-standard" in args and exclude.is_file():
        extra = [f"--exclude-from={exclude}"]
    argv = ["git", "--git-dir", str(repo.mirror), "--work-tree", str(repo.top),
            "--no-replace-objects", "--literal-pathspecs",
            *args[:1], *extra, *args[1:]]  # fmt: skip
    env = git_env(repo)
    env["GIT_INDEX_FILE"] = str(repo.git_dir / "index")
    return _run(argv, env, repo.top, input, check, args[0])


def read_objects(top: Path | Repo, ids: Sequence[str]) -> dict[str, tuple[str, bytes]]:
    """(type, bytes) of each object id, from one `cat-file --batch`; GitError for an id
    git does not answer with exactly that object (missing, ambiguous, a short read)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out = git(top, "cat-file", "--batch", input="".join(f"{i}\n" for i in wanted).encode())
    found: dict[str, tuple[str, bytes]] = {}
    pos = 0
    for obj in wanted:
        end = out.find(b"\n", pos)
        header = out[pos:end].split() if end >= 0 else []
        if len(header) != 3 or header[0].decode("ascii", "replace") != obj:
            raise GitError(f"git cat-file: unexpected answer for {obj}")
        size = int(header[2])
        found[obj] = (header[1].decode("ascii", "replace"), out[end + 1 : end + 1 + size])
        pos = end + 1 + size + 1
    return found


# -- refs, read as data -----------------------------------------------------------------------


def valid_refname(name: str) -> bool:
    """git's refname rules (git-check-ref-format), without running anything."""
    if not name or name.startswith("/") or name.endswith(("/", ".", ".lock")) or name == "@":
        return False
    if any(c in name for c in " ~^:?*[\\\x7f") or "@{" in name or ".." in name or "//" in name:
        return False
    if any(ord(c) < 0x20 for c in name):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in name.split("/"))  # fmt: skip


def _packed_refs(common: Path) -> dict[str, str]:
    try:
        data = (common / "packed-refs").read_bytes()
    except OSError:
        return {}
    refs: dict[str, str] = {}
    for line in data.split(b"\n"):
        if not line or line[:1] in (b"#", b"^"):
            continue
        sha, _, name = line.partition(b" ")
        refs[name.decode("utf-8", "surrogateescape")] = sha.decode("ascii", "replace")
    return refs


def _read_loose(base: Path, name: str) -> bytes | None:
    path = base / name
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(base) + os.sep):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not os.path.isfile(real):
            return None
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def read_ref(repo: Repo, name: str, _depth: int = 0) -> str | None:
    """The commit (or object) a full ref name points at, following symbolic refs; None if absent.

    `HEAD` is this worktree's HEAD; everything else comes from the common dir (loose refs,
    then `packed-refs`). Nothing of the repository runs.
    """
    if _depth > _MAX_SYMREF_DEPTH:
        raise UsageError(f"symbolic ref {name[:80]!r} loops")
    if name == "HEAD":
        raw = _read_loose(repo.git_dir, "HEAD")
    elif name.startswith("refs/") and valid_refname(name):
        raw = _read_loose(repo.common_dir, name)
        if raw is None:
            raw = (_packed_refs(repo.common_dir).get(name) or "").encode() or None
    else:
        return None
    if raw is None:
        return None
    text = raw.decode("utf-8", "surrogateescape").strip()
    if text.startswith("ref: "):
        return read_ref(repo, text[5:].strip(), _depth + 1)
    return text if _SHA.match(text) else None


def symbolic_target(repo: Repo, name: str, git_dir: Path | None = None) -> str | None:
    """Where a symbolic ref points (`refs/heads/main` for a HEAD on main), None if it does not."""
    base = git_dir if git_dir is not None else (repo.git_dir if name == "HEAD" else repo.common_dir)
    raw = _read_loose(base, name)
    if raw is None:
        return None
    text = raw.decode("utf-8", "surrogateescape").strip()
    return text[5:].strip() if text.startswith("ref: ") else None


def current_branch(repo: Repo) -> str | None:
    """The checked-out branch's short name, or None when HEAD is detached."""
    target = symbolic_target(repo, "HEAD")
    if target and target.startswith("refs/heads/"):
        return target.removeprefix("refs/heads/")
    return None


def checked_out_branches(repo: Repo) -> set[str]:
    """Full names of the branches checked out in any worktree of the repository."""
    dirs = [repo.common_dir]
    try:
        dirs += [d for d in (repo.common_dir / "worktrees").iterdir() if d.is_dir()]
    except OSError:
        pass
    out = set()
    for d in dirs:
        target = symbolic_target(repo, "HEAD", git_dir=d)
        if target:
            out.add(target)
    return out


def resolve_commit(top: Path | Repo, ref: str) -> str:
    """A revision (`NAME`, `NAME~2`, `HEAD^`, a SHA or its prefix) to a full commit SHA.

    The name part is looked up in the repository's refs as data; the rest is given to
    oms' own repository. A revision is data: it can never become an option.
    """
    repo = _repo(top)
    if not ref or len(ref) > 1024 or ref.startswith("-") or "\x00" in ref:
        raise UsageError(f"not a valid ref: {ref[:80]!r}")
    cut = min((i for i in (ref.find("~"), ref.find("^")) if i >= 0), default=len(ref))
    name, suffix = ref[:cut], ref[cut:]
    if suffix.endswith("^{commit}"):
        suffix = suffix[: -len("^{commit}")]
    if not _SUFFIX.match(suffix):
        raise UsageError(f"not a revision oms understands: {ref[:80]!r}")
    sha = None if _SHA.match(name) else _lookup(repo, name)
    if sha is None:
        if not _HEX_PREFIX.match(name):
            raise UsageError(f"ref does not name a commit: {ref[:80]!r}")
        sha = name.lower()
    out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
              f"{sha}{suffix}^{{commit}}", check=False).strip()  # fmt: skip
    commit = out.decode("ascii", "replace")
    if not _SHA.match(commit):
        raise UsageError(f"ref does not name a commit: {ref[:80]!r}")
    return commit


def _lookup(repo: Repo, name: str) -> str | None:
    if name in ("HEAD", "@"):
        return read_ref(repo, "HEAD")
    if not valid_refname(name):
        return None
    for rule in _DWIM:
        full = rule.format(name)
        if full.startswith("refs/"):
            sha = read_ref(repo, full)
            if sha is not None:
                return sha
    return None


def default_branch_ref(repo: Repo) -> tuple[str, str]:
    """(full ref, commit) of the default branch: the one `oms init --default-branch` recorded
    in the state root, else origin/HEAD, else main, else master. Never a setting inside the
    repository or its policy."""
    recorded = _recorded_default(repo)
    if recorded is not None:
        sha = read_ref(repo, recorded)
        if sha is None:
            raise UsageError(f"the default branch recorded by `oms init` ({recorded}) is gone")
        return recorded, resolve_commit(repo, sha)
    origin = symbolic_target(repo, "refs/remotes/origin/HEAD")
    for ref in ([origin] if origin else []) + ["refs/heads/main", "refs/heads/master"]:
        sha = read_ref(repo, ref)
        if sha is not None:
            return ref, resolve_commit(repo, sha)
    raise UsageError("no default branch (origin/HEAD, main or master); record one with "
                     "`oms init --default-branch NAME`")  # fmt: skip


def _recorded_default(repo: Repo) -> str | None:
    path = state_root() / "repos" / repo.repo_id / DEFAULT_BRANCH_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        raise UsageError(f"cannot read the recorded default branch ({path.name})") from None
    if not text.startswith("refs/heads/") or not valid_refname(text):
        raise UsageError(f"the recorded default branch is not a branch: {text[:80]!r}")
    return text


def record_default_branch(repo: Repo, name: str) -> str:
    """Record the default branch in the state root (`oms init --default-branch NAME`)."""
    full = name if name.startswith("refs/heads/") else f"refs/heads/{name}"
    if not valid_refname(full):
        raise UsageError(f"not a valid branch name: {name[:80]!r}")
    if read_ref(repo, full) is None:
        raise UsageError(f"no branch {name[:80]!r} in this repository")
    path = state_root() / "repos" / repo.repo_id / DEFAULT_BRANCH_FILE
    atomic_write(path, (full + "\n").encode())
    return full


def default_branch(top: Path | Repo) -> str:
    """The commit at the tip of the default branch."""
    return default_branch_ref(_repo(top))[1]


def is_ancestor(top: Path | Repo, ancestor: str, descendant: str) -> bool:
    repo = _repo(top)
    proc = subprocess.run(git_argv(repo, "merge-base", "--is-ancestor", ancestor, descendant),
                          capture_output=True, env=git_env(repo), cwd=repo.mirror,
                          check=False)  # fmt: skip
    if proc.returncode not in (0, 1):
        raise GitError(f"git merge-base: {proc.stderr.decode('utf-8', 'replace').strip()[:200]}")
    return proc.returncode == 0


def default_base(top: Path | Repo, candidate: str) -> str:
    """Merge-base of the candidate with the repository's default branch."""
    out = git(top, "merge-base", default_branch(top), candidate, check=False).strip()
    if not out:
        raise UsageError("the candidate shares no history with the default branch")
    return out.decode("ascii")


def trusted_base(repo: Repo, candidate: str, base_ref: str | None) -> tuple[str, str]:
    """(base of the diff, commit the policy is read from) for a candidate.

    The policy always comes from the default branch's tip. `--base` only narrows the
    diff: it must be an ancestor of the candidate and reachable from the default branch.
    """
    tip = default_branch(repo)
    if base_ref is None:
        return default_base(repo, candidate), tip
    base = resolve_commit(repo, base_ref)
    if not is_ancestor(repo, base, candidate):
        raise UsageError(f"--base {base_ref[:80]!r} is not an ancestor of the candidate")
    if not is_ancestor(repo, base, tip):
        raise UsageError(f"--base {base_ref[:80]!r} is not reachable from the default branch; "
                         "a base must be trusted history")  # fmt: skip
    return base, tip


# -- config values, read as data --------------------------------------------------------------


def repo_config(repo: Repo, key: str) -> str | None:
    """The last value of `key` in the repository's own config file, parsed by git as data
    (`git config --file`: no includes, nothing run)."""
    out = _run(["git", "config", "--file", str(repo.common_dir / "config"), "--null", "--get",
                key], git_env(repo), repo.mirror, None, False, "config")  # fmt: skip
    return out.rstrip(b"\0").decode("utf-8", "surrogateescape") if out else None


_SCP = re.compile(r"^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:(?!/)")  # user@host:path (not a port)


def checked_url(url: str) -> str:
    """A remote URL oms will run a transport for: https, ssh, or a local path."""
    if url.startswith(("https://", "ssh://")) or _SCP.match(url):
        if "::" in url.split("/")[0] or url.startswith("-"):
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
        if name.decode("utf-8", "surrogateescape") == ref and _SHA.match(text):
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


def push(repo: Repo, remote: str, sha: str, branch: str) -> str:
    """Push exactly `sha` to `branch` on the remote, never forced; returns the URL used."""
    url = remote_url(repo, remote, push=True)
    _run(_transport(repo, "push", "--no-verify", "--", url, f"{sha}:refs/heads/{branch}"),
         git_env(repo), repo.mirror, None, True, "push")  # fmt: skip
    return url


# -- writing a ref of the user's repository ---------------------------------------------------


def write_ref(repo: Repo, ref: str, new: str, old: str | None, message: str) -> None:
    """Set `ref` to `new` in the user's repository if it still points at `old` (None: absent).

    Written as git does (a `.lock` file created exclusively, then renamed), without running
    git in the repository: no hook, no config of the repository takes part.
    """
    if not ref.startswith("refs/heads/") or not valid_refname(ref) or not _SHA.match(new):
        raise UsageError(f"not a branch ref: {ref[:80]!r}")
    path = repo.common_dir / ref
    os.makedirs(path.parent, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise Blocked(f"{ref} is locked by another git process; try again") from None
    try:
        if read_ref(repo, ref) != old:
            raise Blocked(f"{ref} moved while oms was delivering; nothing was changed")
        os.write(fd, new.encode() + b"\n")
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(lock, path)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.lexists(lock):
            os.unlink(lock)
    _append_reflog(repo, ref, old, new, message)


def _append_reflog(repo: Repo, ref: str, old: str | None, new: str, message: str) -> None:
    log = repo.common_dir / "logs" / ref
    if not log.parent.is_dir():
        return
    zero = "0" * len(new)
    line = f"{old or zero} {new} oms <oms@localhost> {int(time.time())} +0000\t{message}\n"
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# -- the policy at a commit -------------------------------------------------------------------


def read_policy_at(top: Path | Repo, sha: str) -> LoadedPolicy:
    """The policy committed at `sha` (never the worktree); absent means the defaults.

    A policy path that is not a regular file in that commit (a symlink, a
    submodule, a directory) is refused: it cannot be read as trusted data.
    """
    listing = git(top, "ls-tree", "-z", "--full-tree", sha, "--", POLICY_FILE)
    if not listing:
        return default_policy()
    meta, _, _ = listing.partition(b"\t")
    mode, kind, obj = meta.decode().split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(f"{sha[:12]}:{POLICY_FILE} is not a regular file (mode {mode})")
    data = git(top, "cat-file", "blob", obj)
    return parse_policy(data, f"{sha[:12]}:{POLICY_FILE}")
