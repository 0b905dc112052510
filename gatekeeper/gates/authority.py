"""`oms doctor`'s authority and egress sections: who could sign here, and what egress means.

Approvals and evidence are only as strong as the answer to one question: can the process
that runs the agent read the signing key? `key_readable` tries it (opens the file for
reading, reads nothing, prints nothing of it). Whether this process is inside an oms agent
sandbox is the caller's to say (`gatekeeper.agent.inside`, a layer above the gates).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evidence import state_root
from evidence.keys import PRIVATE_KEY_FILE
from policy import LoadedPolicy

AUTHORITY_NOTE = (
    "approvals and evidence are only as strong as this answer: an agent that can read "
    "the key can sign; run agents under `oms agent run`"
)
NO_AUTHORITY_INSIDE = "no authority here"
EGRESS_MODES: Mapping[str, str] = {
    "none": "no network at all",
    "api": "brokered: each request to the provider's model endpoints is scanned by both "
    "scanners, its secrets redacted (or the request blocked, per policy) and recorded as "
    "evidence; the real key is added outside",
    "tunnel": "an opaque CONNECT to the provider hosts on 443, for subscription logins: "
    "only the host and the bytes are recorded, nothing is scanned",
}
_RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")


@dataclass(frozen=True)
class AgentSandbox:
    """Where the caller found this process: inside an oms agent sandbox, and its run."""

    inside: bool
    run_id: str | None = None

    @classmethod
    def of(cls, inside: bool, marker: Mapping[str, Any]) -> AgentSandbox:
        """From the marker's contents; a run id that is not one is left out, not shown."""
        run_id = marker.get("run_id")
        ok = inside and isinstance(run_id, str) and _RUN_ID.fullmatch(run_id) is not None
        return cls(inside, run_id if ok else None)


class _Section(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Authority(_Section):
    key_readable: bool
    inside_agent_sandbox: bool
    run_id: str | None
    note: str = AUTHORITY_NOTE


class Egress(_Section):
    on_secret: Literal["redact", "block"]
    modes: dict[str, str]


def key_path(root: Path) -> Path:
    return root / "keys" / PRIVATE_KEY_FILE


def key_readable(path: Path) -> bool:
    """Can this process open `path` for reading? Tried, not guessed from mode bits (root
    reads everything); a FIFO does not block; nothing is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def authority(here: AgentSandbox) -> Authority:
    readable = key_readable(key_path(state_root()))
    return Authority(key_readable=readable, inside_agent_sandbox=here.inside, run_id=here.run_id)


def breach(section: Authority) -> str | None:
    """A problem only when the key is readable from inside a sandbox meant to hide it."""
    if section.inside_agent_sandbox and section.key_readable:
        return "the signing key is readable inside an oms agent sandbox: it does not contain agents"
    return None


def egress(loaded: LoadedPolicy) -> Egress:
    return Egress(on_secret=loaded.policy.agent.egress.on_secret, modes=dict(EGRESS_MODES))
