"""`command:<name>` providers: any CLI from `[providers.<name>] cmd`, run under `oms agent
run` with no network (`egress = "none"`); the task on stdin and as `$OMS_TASK_FILE`, an
answer schema (a grader's) as `$OMS_SCHEMA_FILE`.

The argv is exactly the policy's `cmd`, which comes from the default branch; nothing of
the task (ticket text, a grading document) is ever added to it.
"""

from __future__ import annotations

import json

from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.work.providers.base import (
    ProviderReceipt,
    ProviderRequest,
    RoleUnavailable,
    receipt,
    stdout_of,
)


def command_request(req: ProviderRequest) -> AgentRunRequest:
    """What `oms agent run` is asked to do for a command provider's run."""
    role = req.role
    if not role.cmd:
        raise RoleUnavailable(f"role {role.name}: provider {role.provider} has no command")
    schema = None
    if req.output_schema is not None:
        schema = json.dumps(req.output_schema, sort_keys=True).encode()
    return AgentRunRequest(
        repo_dir=req.repo_dir, cmd=role.cmd, agent="command",
        egress="api" if role.egress == "api" else "none",
        base_ref=req.base, capture=True, run_id=req.run_id, stdin=req.document,
        task_file=req.document, schema_file=schema, timeout_s=req.timeout_s or role.timeout_s,
        read_only=role.authority == "read-only", budget=req.budget,
    )  # fmt: skip


def run_command(req: ProviderRequest) -> ProviderReceipt:
    """Run the command provider of `req.role` to completion; its stdout is the output."""
    out = agent_run(command_request(req))
    return receipt(req.role, req.loaded, out, stdout_of(out), None)
