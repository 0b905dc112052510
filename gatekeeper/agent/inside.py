"""Fixed places inside the agent sandbox, and how oms knows it runs there.

Stdlib only and tiny: `oms` checks `inside_agent_sandbox()` before loading any command.
The marker is bound read-only by oms, so the agent can neither remove it nor fake its
absence; on the host the path does not exist.
"""

from __future__ import annotations

import json
import os
from typing import Any

RUN_DIR = "/run/oms"
MARKER = f"{RUN_DIR}/run.json"  # {"run_id": ..., "socket": ..., "relay_port": ...}
SOCKET = f"{RUN_DIR}/broker.sock"  # the one socket bound in: the broker outside
TASK_FILE = f"{RUN_DIR}/task.json"  # the task document, read-only; named by $OMS_TASK_FILE
SCHEMA_FILE = f"{RUN_DIR}/schema.json"  # a JSON schema for the CLI's answer, read-only
BIN = f"{RUN_DIR}/bin"  # `oms` inside: this oms, whatever the agent's PATH holds
WORKSPACE = "/workspace"
HOME = "/home/agent"
TMP = "/tmp"  # noqa: S108 # nosec B108 -- the sandbox's own capped tmpfs
# Loopback port of the in-sandbox relay to the broker (ANTHROPIC_BASE_URL, OPENAI_BASE_URL).
RELAY_PORT = 47_100
# With `--egress tunnel`: the relay's second port (HTTPS_PROXY) and the tunnel's socket.
TUNNEL_PORT = RELAY_PORT + 1
TUNNEL_SOCKET = f"{RUN_DIR}/tunnel.sock"
# Commands that reach the broker from inside; everything else has no state to reach.
BROKERED = ("mcp", "hook", "worker", "conductor")


def inside_agent_sandbox() -> bool:
    return os.path.exists(MARKER)


def marker() -> dict[str, Any]:
    """The marker's contents; {} when absent or unreadable."""
    try:
        with open(MARKER, "rb") as f:
            data = json.loads(f.read(65536))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
