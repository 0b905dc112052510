"""Shell commands an agent must not run: the few that reach oms' authority or undo the
result gate's premises. Best effort by design (oms is not a shell linter): the command is
tokenised with `shlex` into simple commands, and each is matched against a short table;
everything else passes. Containment is `oms agent run`'s job, not this one's.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Iterator, Sequence

from gatekeeper.integrations.hooks.secret_paths import REMEDY, secret_name
from gatekeeper.text import path_text

# Separators `shlex` (punctuation_chars) yields as tokens of their own.
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", "(", ")", ";;", "\n"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
# The state root spelled as an agent would type it (`$OMS_HOME`, `${OMS_HOME}`, the default).
_STATE_SPELLINGS = ("OMS_HOME", ".local/state/oms")
_FORCE_FLAGS = frozenset({"--force", "--force-with-lease", "--force-if-includes", "--mirror"})
# Commands that write their operands (or, for sed/perl, in place).
_WRITERS = frozenset({"cp", "mv", "ln", "tee", "install", "chmod", "chown", "touch", "rsync",
                      "dd", "sed", "perl", "rm", "truncate", "patch", "unzip", "tar"})  # fmt: skip
_HOOKS_DIR = ".git/hooks"
# Commands that print, copy, send or load the files they name (`python -c` and `sh -c` code
# included); git's subcommands that print a file's content.
_READERS = frozenset({"cat", "tac", "nl", "less", "more", "most", "head", "tail", "grep",
                      "egrep", "fgrep", "rg", "ag", "ack", "base64", "base32", "xxd", "od",
                      "hexdump", "strings", "cp", "scp", "rsync", "install", "curl", "wget",
                      "python", "node", "deno", "bun", "perl", "ruby", "php", "awk", "gawk",
                      "sed", "sort", "uniq", "cut", "paste", "diff", "cmp", "comm", "vi", "vim",
                      "nvim", "view", "nano", "emacs", "bat", "batcat", "source", ".", "sh",
                      "bash", "zsh", "dash", "openssl", "gpg", "tar", "zip", "gzip", "bzip2",
                      "xz", "zstd", "dd", "iconv", "fold", "fmt", "column", "pr"})  # fmt: skip
_GIT_READERS = frozenset({"show", "diff", "grep", "blame", "cat-file", "log"})
# Copiers whose last operand is where they write, not what they read.
_COPIERS = frozenset({"cp", "scp", "rsync", "install"})
# A token split into the paths it may name: `@.env`, `file=@.env`, `open('.env')`, `HEAD:.env`.
_NOT_PATH = re.compile(r"[^\w./~+-]+")
_WRAPPERS = frozenset({"sudo", "env", "command", "exec", "nice", "nohup", "time", "timeout",
                       "xargs", "builtin"})  # fmt: skip


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: the words as typed, still worth matching
        return command.split()


def simple_commands(command: str) -> Iterator[list[str]]:
    """Each simple command of `command` (words between separators), wrappers such as
    `sudo` or `env X=1` dropped from the front."""
    current: list[str] = []
    for tok in [*_tokens(command), ";"]:
        if tok in _SEPARATORS:
            if current:
                yield _unwrap(current)
            current = []
        else:
            current.append(tok)


def _unwrap(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) and ("=" in words[i].split("/")[0] or _name(words[i]) in _WRAPPERS):
        i += 1
        while i < len(words) and words[i].startswith("-") and _name(words[i - 1]) != "env":
            i += 1  # a wrapper's own flags (`timeout -s KILL` is close enough)
    return words[i:] or words


def _name(word: str) -> str:
    return os.path.basename(word)


def _state_root_reason(command: str, state_root: str | None) -> str | None:
    spelled = [s for s in _STATE_SPELLINGS if s in command]
    if state_root and state_root.rstrip("/") in command:
        spelled.append(state_root)
    if spelled:
        return "it names oms' state root (keys, approvals, evidence), which agents must not read"
    return None


def _git_args(words: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """(global options, the subcommand and its arguments) of a git command, else None."""
    if not words or _name(words[0]) != "git":
        return None
    opts: list[str] = []
    i = 1
    while i < len(words) and words[i].startswith("-"):
        opts.append(words[i])
        if words[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") and i + 1 < len(
            words
        ):
            opts.append(words[i + 1])
            i += 1
        i += 1
    return opts, list(words[i:])


def _is_force_push(rest: Sequence[str]) -> bool:
    if not rest or rest[0] != "push":
        return False
    for arg in rest[1:]:
        flag = arg.split("=", 1)[0]
        if flag in _FORCE_FLAGS:
            return True
        if arg.startswith("-") and not arg.startswith("--") and "f" in arg[1:]:
            return True  # -f, -uf, …
        if arg.startswith("+") and len(arg) > 1:
            return True  # +refspec: a forced update of that ref
    return False


def _sets_hooks_path(opts: Sequence[str], rest: Sequence[str]) -> bool:
    if any("core.hookspath" in o.lower() for o in opts):
        return True  # `git -c core.hooksPath=… CMD` runs hooks from elsewhere
    return bool(rest) and rest[0] == "config" and any("core.hookspath" in a.lower() for a in rest)


def _writes_hooks_dir(words: Sequence[str]) -> bool:
    for i, word in enumerate(words):
        if _HOOKS_DIR not in word:
            continue
        if i > 0 and words[i - 1] in _REDIRECTS:
            return True
        if _name(words[0]) in _WRITERS:
            return True
    return False


def _program(word: str) -> str:
    """A command's name without a version suffix (`python3.12` reads as `python`)."""
    name = _name(word)
    return name if name in _READERS else re.sub(r"[0-9.]+$", "", name) or name


def _read_operands(words: Sequence[str]) -> Iterator[str]:
    """The tokens of one simple command that name what it reads: every operand of a
    reading command but a write redirection's target (and a copier's destination), and the
    source of any `<` redirection."""
    git = _git_args(words)
    reader = _program(words[0]) in _READERS or (
        git is not None and bool(git[1]) and git[1][0] in _GIT_READERS
    )
    skipped: set[int] = set()
    if _program(words[0]) in _COPIERS:
        dest = [i for i, w in enumerate(words) if i > 0 and not w.startswith("-")]
        skipped.update(dest[-1:])
    for i, word in enumerate(words):
        if word in _REDIRECTS or word.startswith(">"):
            skipped.add(i + 1)  # what follows is written, not read
        elif word.startswith("<") and i + 1 < len(words):
            yield words[i + 1]
        elif reader and i > 0 and i not in skipped:
            yield word


def _secret_read(words: Sequence[str]) -> str | None:
    for word in _read_operands(words):
        for piece in _NOT_PATH.split(word):
            kind = secret_name(piece)
            if kind is not None:
                return f"it reads {path_text(piece)}, {kind}. {REMEDY}"
    return None


def _runs_approve(words: Sequence[str]) -> bool:
    names = [_name(w) for w in words]
    if not any(n == "oms" or n == "gatekeeper" for n in names):
        return False
    rest = [w for w in words if not w.startswith("-")]
    return any(a == "transfer" and b == "approve" for a, b in itertools.pairwise(rest))


def bash_refusal(command: str, state_root: str | None) -> str | None:
    """Why `command` is refused, or None when it passes."""
    reason = _state_root_reason(command, state_root)
    if reason is not None:
        return reason
    for words in simple_commands(command):
        if _runs_approve(words):
            return "`oms transfer approve` is for a human at their own terminal, never an agent"
        if _writes_hooks_dir(words):
            return "it writes into .git/hooks; git hooks are the repository owner's to change"
        reason = _secret_read(words)
        if reason is not None:
            return reason
        parsed = _git_args(words)
        if parsed is None:
            continue
        opts, rest = parsed
        if _is_force_push(rest):
            return "it force-pushes, which rewrites history others rely on; push without force"
        if _sets_hooks_path(opts, rest):
            return "it changes git's core.hooksPath; git hooks are the repository owner's to change"
    return None
