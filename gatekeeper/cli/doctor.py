"""`oms doctor`: readiness, and the digest of the MCP tools a found repository would serve."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.agent.inside import inside_agent_sandbox, marker
from gatekeeper.agent.key_check import doctor_check as key_check
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, View, command, doctor_lines
from gatekeeper.errors import EXIT_BLOCKED, EXIT_OK, EXIT_UNAVAILABLE
from gatekeeper.gates import doctor as readiness
from gatekeeper.gates.authority import AgentSandbox
from gatekeeper.integrations.install.timeouts import doctor_check as hook_timeouts
from gatekeeper.work.audit import doctor_check
from gatekeeper.work.cosign import doctor_check as cosign_check
from gatekeeper.work.job_log import doctor_check as schedule_check


@click.command()
@REPO_OPTION
@command
def doctor(repo: Path) -> Outcome:
    """Readiness: a real sandbox probe, AppArmor status, key and chain."""
    # Inside an agent sandbox too: it says so, and that there is no authority here.
    # The layers above the gates hand their checks in from here: `work` (work.db against
    # the log) and the warnings about a provider key, the installed hooks' time-outs and
    # the schedule's last runs.
    checks = (doctor_check, cosign_check, key_check, hook_timeouts, schedule_check)
    found = readiness.doctor(repo, AgentSandbox.of(inside_agent_sandbox(), marker()), checks)
    report, ready = found.to_json(), found.ready
    if report["repository"]["ok"]:  # a repository was found: the MCP tools it would serve
        # Imported here: on a cache miss, the MCP SDK and every tool module are this line's
        # cost alone.
        from gatekeeper.mcp.digest_cache import doctor_digest

        report["mcp_tools_digest"] = doctor_digest(repo)
    lines = doctor_lines(report, ready, View.detect())
    code = EXIT_OK if ready else EXIT_BLOCKED if found.tampered else EXIT_UNAVAILABLE
    return Outcome(report, code=code, lines=lines)
