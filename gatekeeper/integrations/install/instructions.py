"""The short section oms adds to CLAUDE.md / AGENTS.md: which oms MCP tool to call when.

It sits between two markers so that a reinstall replaces it and an uninstall removes it
without touching a line the user wrote around it.
"""

from __future__ import annotations

from pathlib import Path

from gatekeeper.errors import UsageError
from gatekeeper.integrations.install.changes import FileEdit, read_config

BEGIN = "<!-- oms:begin -->"
END = "<!-- oms:end -->"

_BODY = """\
## oms: the gatekeeper on this repository

oms guards this repository; its MCP server is `oms` and its hooks check your writes.

- Before you say the work is done: commit it, then call `oms_process_result` with the
  commit. Only `READY_FOR_HUMAN` means done; on `FAILED` or `BLOCKED`, fix the reasons it
  gives and call it again. A human reviews and merges; you never merge.
- Before sending repository content to a model or any outside service: call
  `oms_model_access`, then `oms_transfer_preview`. A human approves in their own terminal
  (`oms transfer approve ...`); never run that command yourself. `oms_transfer_status`
  says whether it was approved.
- To look around: `oms_status` (HEAD, last verdict), `oms_policy` (the checks and
  protected paths), `oms_doctor` (is oms ready), `oms_runs` (recent verdicts).
- Do not edit oms.toml, .claude/, .mcp.json, .codex/, CLAUDE.md or AGENTS.md, and do not
  read oms' state directory ($OMS_HOME): they are protected and the hooks deny it.
- When a hook denies a write because of a secret, remove the secret (use an environment
  variable or a placeholder) instead of working around the hook.
"""


def section(client: str) -> str:
    """The marked block, ending with a newline; `client` names the uninstall command."""
    undo = f"<!-- added by `oms install {client}`; `--uninstall` removes it -->"
    return f"{BEGIN}\n{undo}\n{_BODY}{END}\n"


def _span(text: str) -> tuple[int, int] | None:
    """Where the marked block is, END's line included; None when absent or malformed."""
    start = text.find(BEGIN)
    if start < 0 or (start > 0 and text[start - 1] != "\n"):
        return None
    end = text.find(END, start)
    if end < 0:
        return None
    stop = end + len(END)
    return start, stop + 1 if text[stop : stop + 1] == "\n" else stop


def with_section(text: str, client: str) -> str:
    """`text` with oms' block in place: replaced where it is, else appended after a blank
    line."""
    block = section(client)
    span = _span(text)
    if span is not None:
        return text[: span[0]] + block + text[span[1] :]
    if not text:
        return block
    return text + ("\n" if text.endswith("\n") else "\n\n") + block


def without_section(text: str) -> str:
    """`text` without oms' block and the blank line that `with_section` put before it."""
    span = _span(text)
    if span is None:
        return text
    head, tail = text[: span[0]], text[span[1] :]
    if not tail and head.endswith("\n\n"):
        head = head[:-1]
    return head + tail


def edit(path: Path, root: Path, client: str, install: bool) -> FileEdit:
    """The instructions file with oms' section added (install) or taken out; a file oms
    created and that holds nothing else is removed."""
    before = read_config(path, root)
    try:
        text = (before or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; oms will not rewrite it") from None
    new = with_section(text, client) if install else without_section(text)
    after: bytes | None = new.encode("utf-8")
    if new == text:
        after = before
    elif not new and not install:
        after = None
    return FileEdit(path, root, before, after, ("the oms section",))
