"""Reading a human's yes from the controlling terminal, and only from there.

Standard input is never used: an agent that runs oms controls stdin. No flag or
environment variable turns this into a non-interactive approval. The prompt is
shown whole or not at all: nothing the human approves is cut, and a prompt too
long for a terminal (over `MAX_PROMPT_LINES` or `MAX_PROMPT_CHARS`) is refused
before the terminal is opened, so the human narrows the transfer instead.

A prompt longer than the terminal is paged there, a screen at a time: the human reads
every page (Enter) before the question comes, or stops (q) and nothing is approved. Not
`$PAGER`: the prompt must stay on the controlling terminal, and the pager is a program
the environment names.
"""

from __future__ import annotations

import os
import pwd
import textwrap

from gatekeeper.errors import Blocked
from gatekeeper.gates.transfer.payloads import HumanApprover

MAX_PROMPT_LINES = 10_000
MAX_PROMPT_CHARS = 2_000_000
WRAP_WIDTH = 76
_QUESTION = b"Approve this transfer? Type 'yes' to approve: "
_HEADER = "oms: a transfer asks for your approval"
_MORE = "-- {shown} of {total} lines shown: Enter for more, q to stop (not approved) -- "
NOT_READ = "not approved at the terminal: the prompt was not read to its end"


def wrap_exact(text: str, width: int = WRAP_WIDTH) -> list[str]:
    """Lines of at most `width` characters (breaking at spaces where it can) whose
    concatenation is exactly `text`: no character, not even a space, is dropped."""
    wrapper = textwrap.TextWrapper(
        width=width,
        expand_tabs=False,
        replace_whitespace=False,
        drop_whitespace=False,
        break_on_hyphens=False,
    )
    return wrapper.wrap(text) or [""]


def approver_identity() -> HumanApprover:
    """Who approved: the process's real uid and its passwd name. `$LOGNAME`/`$USER` are
    never read: whoever started the process chose them."""
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = f"uid-{uid}"
    return HumanApprover(name=name, uid=uid)


def _check_showable(lines: list[str]) -> None:
    chars = sum(len(line) + 1 for line in lines)
    if len(lines) > MAX_PROMPT_LINES or chars > MAX_PROMPT_CHARS:
        raise Blocked(
            f"the approval prompt would be {len(lines)} lines ({chars} characters), over what "
            f"a terminal approval shows ({MAX_PROMPT_LINES} lines, {MAX_PROMPT_CHARS} "
            "characters): narrow the transfer (--context paths) and preview again"
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_answer(fd: int) -> bytes:
    answer = b""
    while not answer.endswith(b"\n") and len(answer) < 64:
        ch = os.read(fd, 1)
        if not ch:
            break
        answer += ch
    return answer


def pages(lines: list[str], rows: int) -> list[list[str]]:
    """`lines` in screens of `rows - 1` (one row for the "more" line), or one screen when
    they fit beside the question or the terminal's size is unknown (`rows` 0)."""
    if rows < 3 or len(lines) < rows:
        return [lines]
    per = rows - 1
    return [lines[i : i + per] for i in range(0, len(lines), per)]


def _terminal_rows(fd: int) -> int:
    try:
        return os.get_terminal_size(fd).lines
    except OSError:
        return 0


def _show_paged(fd: int, lines: list[str]) -> None:
    """Every line at the terminal, a screen at a time; Blocked unless each page is read."""
    screens = pages(lines, _terminal_rows(fd))
    shown = 0
    for n, screen in enumerate(screens, start=1):
        _write_all(fd, ("\n".join(screen) + "\n").encode("utf-8", "replace"))
        shown += len(screen)
        if n == len(screens):
            return
        _write_all(fd, _MORE.format(shown=shown, total=len(lines)).encode())
        answer = _read_answer(fd)
        if answer.strip() or not answer.endswith(b"\n"):  # only Enter reads on
            raise Blocked(NOT_READ)


def confirm_at_terminal(
    lines: list[str], question: bytes = _QUESTION, header: str = _HEADER
) -> HumanApprover:
    """Show `lines` (already neutralised) in full at /dev/tty and read `yes` there."""
    _check_showable(lines)
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        raise Blocked("approval needs a human at a terminal: there is no controlling terminal"
                      ) from None  # fmt: skip
    try:
        _show_paged(fd, [header, *lines])
        _write_all(fd, question)
        answer = _read_answer(fd)
    finally:
        os.close(fd)
    if answer.strip().lower() != b"yes":
        raise Blocked("not approved at the terminal")
    return approver_identity()
