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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evidence import repo_id_for, state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import UsageError

SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


_UNSAFE_PATH = re.compile(r"[\x00-\x1f\x7f]")


class GitError(UsageError):
    """git refused: not a repository, a ref that does not resolve, and the like."""


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
    # Checked on every open, cached or not: a long-lived caller (the MCP server) must see
    # a repository that became shallow or moved to reftable after its first open.
    _refuse_unsafe(top, common)
    known = _REPOS.get(key)
    if known is not None and known.git_dir == git_dir and known.common_dir == common:
        return known
    repo_id = repo_id_for(common)
    repo = Repo(top, common, repo_id, git_dir)
    _REPOS[key] = repo
    return repo


def repo_id_at(path: Path) -> str:
    """The id of the repository containing `path`, found by reading files only: also for a
    repository open_repo refuses (shallow, reftable), whose state must still be found."""
    return repo_id_for(_discover(path)[2])


def repo_of(top: Path | Repo) -> Repo:
    if isinstance(top, Repo):
        return top
    known = _REPOS.get((str(state_root()), str(Path(os.path.realpath(top)))))
    return known if known is not None else open_repo(top)


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
    repo = repo_of(top)
    return ["git", "--git-dir", str(repo.mirror), "--no-replace-objects",
            "--literal-pathspecs", *args]  # fmt: skip


def run_argv(argv: list[str], env: dict[str, str], cwd: Path, input: bytes | None,
             check: bool, what: str, timeout: float | None = None) -> bytes:  # fmt: skip
    """stdout of `argv`; GitError on failure when `check`. Past `timeout` seconds git is
    killed and subprocess.TimeoutExpired raised, for the caller to name its own deadline."""
    proc = subprocess.run(argv, input=input, capture_output=True, env=env, cwd=cwd,
                          check=False, timeout=timeout)  # fmt: skip
    if check and proc.returncode != 0:
        first = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = first[0] if first else f"exit {proc.returncode}"
        raise GitError(f"git {what}: {reason}")
    return proc.stdout


def git(top: Path | Repo, *args: str, input: bytes | None = None, check: bool = True,
        timeout: float | None = None) -> bytes:  # fmt: skip
    """git ARGS in oms' repository for `top` (objects only); stdout bytes. GitError on failure."""
    repo = repo_of(top)
    return run_argv(git_argv(repo, *args), git_env(repo), repo.mirror, input, check, args[0],
                    timeout)  # fmt: skip


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
    return run_argv(argv, env, repo.top, input, check, args[0])


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


def is_ancestor(top: Path | Repo, ancestor: str, descendant: str) -> bool:
    repo = repo_of(top)
    proc = subprocess.run(git_argv(repo, "merge-base", "--is-ancestor", ancestor, descendant),
                          capture_output=True, env=git_env(repo), cwd=repo.mirror,
                          check=False)  # fmt: skip
    if proc.returncode not in (0, 1):
        raise GitError(f"git merge-base: {proc.stderr.decode('utf-8', 'replace').strip()[:200]}")
    return proc.returncode == 0
