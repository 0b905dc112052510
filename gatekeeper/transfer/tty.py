"""Reading a human's yes from the controlling terminal, and only from there.

Standard input is never used: an agent that runs oms controls stdin. No flag or
environment variable turns this into a non-interactive approval.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from ..errors import Blocked


def confirm_at_terminal(summary: list[str]) -> dict[str, Any]:
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        raise Blocked("approval needs a human at a terminal: there is no controlling terminal"
                      ) from None  # fmt: skip
    with os.fdopen(fd, "r+b", buffering=0) as tty:
        text = "\n".join(["oms: a transfer asks for your approval", *summary, ""])
        tty.write(text.encode("utf-8", "replace"))
        tty.write(b"Approve this transfer? Type 'yes' to approve: ")
        answer = b""
        while not answer.endswith(b"\n") and len(answer) < 64:
            ch = tty.read(1)
            if not ch:
                break
            answer += ch
    if answer.strip().lower() != b"yes":
        raise Blocked("not approved at the terminal")
    return {"name": getpass.getuser(), "uid": os.getuid()}
