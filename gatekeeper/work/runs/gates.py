"""The gates a run stops at, and the only ways through them.

`transfer`: a provider step whose role sends repository context to an external model. The
run previews a manifest itself (`to` = the role's provider:model, the repository at HEAD,
the step's brief as its purpose: scanned like the files) and stops at `awaiting_approval`.
It goes on only when that exact manifest is approved: by a human (`oms transfer approve
… --code …` as copied, or `oms run continue RUN --approve` at a controlling terminal, which
asks there), or by an autopilot rule of the default branch's policy (then the approval is
the policy's, recorded as `transfer.approve` and as the run's `approval_auto_approved`).
As the provider starts, the approval is used up (`transfer.release`): single use.

`plan`: an implement run's plan, approved before anything writes. Only `oms run continue
--approve` at a controlling terminal (the plan's summary is shown there) or `[runs]
autopilot = ["plan"]` passes it.

MCP and a CLI without a terminal can reject, revise or say `none`; they can never approve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.gates.transfer.approve import approve as approve_transfer
from gatekeeper.gates.transfer.autopilot import approving_rule
from gatekeeper.gates.transfer.packet import approval_command
from gatekeeper.gates.transfer.preview import preview
from gatekeeper.gates.transfer.release import release
from gatekeeper.gates.transfer.state import locate, state_at
from gatekeeper.gates.transfer.tty import confirm_at_terminal
from gatekeeper.gates.transfer.unchanged import check_unchanged
from gatekeeper.text import sanitize
from gatekeeper.work import payloads as p
from gatekeeper.work.fence import Work
from gatekeeper.work.providers.base import Role
from gatekeeper.work.runs.model import Gate, Run
from gatekeeper.work.transfers import destination_of

PLAN_QUESTION = b"Approve this plan? Type 'yes' to approve: "
LINE_CHARS = 300


class ApprovalRefused(Blocked):
    """`approve` asked for where no human can give it (MCP, or no controlling terminal)."""


class TransferBlocked(Blocked):
    """The manifest a provider step needs is blocked (a secret would leave, a path is
    protected…): nothing is sent and the step fails."""


@dataclass(frozen=True)
class Cleared:
    """A provider step may run: under `transfer` (None when its role is not external),
    approved by `approver` ("human" or "policy:<rule>")."""

    transfer: str | None = None
    approver: str | None = None

    def events(self) -> list[tuple[str, Mapping[str, Any]]]:
        if self.approver and self.approver.startswith("policy:"):
            return [("approval_auto_approved", {"gate": "transfer", "transfer": self.transfer,
                                                "rule": self.approver})]  # fmt: skip
        return []


def auto_passes(work: Work, gate: Gate | None) -> bool:
    """A plan gate that `[runs] autopilot = ["plan"]` of the default branch's policy passes
    (the implement step records it as `approval_auto_approved`); a transfer gate never
    passes on its own here (its autopilot rules apply when it is previewed)."""
    if gate is None or gate.kind != "plan":
        return False
    return "plan" in work.loaded.policy.runs.autopilot


def destination(role: Role) -> str:
    return destination_of(role)


def transfer_gate(work: Work, run: Run, role: Role, run_role: str, step: str,
                  purpose: str) -> Cleared | Gate:  # fmt: skip
    """Cleared when `role` needs no transfer, or the run's manifest for this step is approved
    (or an autopilot rule approves a fresh one now); else the gate to stop at."""
    if not role.external:
        return Cleared()
    g = run.gate
    if g is not None and g.kind == "transfer" and g.step == step and g.policy_role == role.name:
        assert g.transfer is not None
        got = readiness(work, g.transfer)
        if got is not None:
            return got if isinstance(got, Cleared) else g
        # expired, released or blocked: that manifest is spent; preview a fresh one
    digest = previewed(work, run, role, purpose)
    got = readiness(work, digest)
    if isinstance(got, Cleared):
        return got
    return Gate(kind="transfer", step=step, role=run_role, policy_role=role.name,
                transfer=digest,
                reason=f"{run_role} ({destination(role)}) would receive repository context: "
                "a human approves the transfer manifest first")  # fmt: skip


def previewed(work: Work, run: Run, role: Role, purpose: str) -> str:
    """A fresh manifest for `role`'s destination: the repository at HEAD, `purpose` (scanned
    too), recorded as `transfer.preview` naming the run. TransferBlocked when blocked."""
    subject = p.subject(f"oms-run:{run.id}")
    got = preview(work.repo.top, destination(role), purpose, "repo", [], None, False,
                  requested_by=subject)  # fmt: skip
    if got.manifest.blocked:
        raise TransferBlocked(f"the transfer to {destination(role)} is blocked: "
                              + "; ".join(got.manifest.block_reasons))  # fmt: skip
    return str(got.digest)


def readiness(work: Work, digest: str) -> Cleared | str | None:
    """Where manifest `digest` stands: Cleared when approved (by a human, or now by an
    autopilot rule, which approves it as the policy); "previewed" while it waits for a
    human; None when it is spent (expired, released, blocked) or no longer describes what
    would leave (HEAD or the files moved since it was previewed)."""
    at = locate(work.repo.top, Sha256Digest.parse(digest))
    status = state_at(at).status
    if status not in ("approved", "previewed") or not still_holds(work, digest):
        return None  # HEAD or the files moved since: approve and release would refuse it
    if status == "approved":
        return Cleared(digest, "human")
    rule = approving_rule(work.loaded.policy.transfer, at.manifest)
    if rule is None:
        return "previewed"
    approve_transfer(work.repo.top, digest, at.manifest.nonce[:8])
    return Cleared(digest, f"policy:{rule}")


def approval_line(work: Work, gate: Gate) -> str | None:
    """The copyable `oms transfer approve sha256:… --code …` of a transfer gate."""
    if gate.kind != "transfer" or gate.transfer is None:
        return None
    at = locate(work.repo.top, Sha256Digest.parse(gate.transfer))
    return approval_command(at.manifest, at.digest)


def approve_at_terminal(work: Work, run: Run, summary_lines: list[str]) -> str:
    """A human's yes to the run's open gate, read at the controlling terminal (never stdin);
    ApprovalRefused without a terminal. Returns who approved."""
    g = run.gate
    if g is None:
        raise UsageError(f"run {run.id} has no open gate to approve")
    try:
        if g.kind == "transfer":
            assert g.transfer is not None
            at = locate(work.repo.top, Sha256Digest.parse(g.transfer))
            approve_transfer(work.repo.top, g.transfer, at.manifest.nonce[:8])
            return "human"
        shown = [sanitize(line, limit=LINE_CHARS) for line in summary_lines]
        who = confirm_at_terminal([f"run {run.id} asks you to approve its plan", "", *shown],
                                  PLAN_QUESTION)  # fmt: skip
    except Blocked as exc:
        raise ApprovalRefused(exc.message) from None
    return f"human:{who.name}"


def use_up(work: Work, cleared: Cleared) -> None:
    """Just before the provider runs under `cleared.transfer`: the approval is spent
    (recorded as `transfer.release`, after every byte is re-read and found as previewed; the
    payload is not written anywhere). A refusal here means nothing was sent."""
    if cleared.transfer is not None:
        release(work.repo.top, cleared.transfer, "run")


def still_holds(work: Work, digest: str) -> bool:
    """Whether manifest `digest` still describes what would leave (HEAD, the selection and
    its bytes as previewed). A summon's side gate previews anew when it does not, rather than
    wait on an approval that approve or release would refuse ("HEAD moved")."""
    at = locate(work.repo.top, Sha256Digest.parse(digest))
    try:
        check_unchanged(at.repo, at.manifest, work.loaded.policy.transfer)
    except Blocked:
        return False
    return True
