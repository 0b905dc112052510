"""`oms dispatch`: a leased ticket delivered to a role's provider adapter, fenced and recorded.

A thin caller (DESIGN.md "Orchestration"). Every refusal happens before `begin_dispatch`,
so a refused dispatch changes nothing: the role must resolve from the default branch's
policy and be eligible for an unattended run, a ticket goes only to a `worktree-write`
role, and a role that sends repo context to an external model needs an approved (or
released) transfer manifest of this repository, or an autopilot rule that covers it.
Then the envelope (goal, ticket, lease, attempt, role/model, workspace, base, capabilities,
acceptance, nonce, transfer) is persisted and the ticket is `running` BEFORE the adapter
runs; the task reaches the provider only as `ProviderRequest.document` (stdin and
`$OMS_TASK_FILE`), never argv. The run's facts are recorded, and a commit becomes the
receipt (`verifying`); no commit ends the dispatch (`retryable`, or `blocked` at the limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import rfc8785

from gatekeeper.agent.workspace import new_run_id, workspace_path
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import refusal
from gatekeeper.work import budget, roles
from gatekeeper.work.api import opened
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Dispatch, DispatchPlan, RunFacts, Spent, Ticket
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderReceipt, ProviderRequest, Role, RoleUnavailable
from gatekeeper.work.transfers import approved_transfer

# What each engine's run may reach besides its workspace (the adapters choose the egress).
LEASE_MARGIN_S = 10  # after the run: collect, record the run, file the receipt
_EGRESS: Mapping[str, str] = {"claude-code": "egress:api", "codex-cli": "egress:api"}


def dispatch(repo_dir: Path, ticket: str, lease_token: str, role_name: str, nonce: str,
             transfer: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Run one dispatch of `ticket` to `role_name` to completion; the command's JSON. Its
    `dispatch.state` is `received` when the run's commit became the receipt."""
    with opened(repo_dir) as work:
        role = _eligible(work, role_name)
        run = adapter(role)  # an engine without an adapter is refused here, before the fence
        digest = approved_transfer(
            work, role, Sha256Digest.parse(transfer) if transfer is not None else None
        )
        plan = _plan(work, role, digest, ticket)
        # The run is cut to the lease, so its end is recorded while the lease still fences it.
        started = work.begin_dispatch(ticket, lease_token, plan, nonce,
                                      min_left_s=LEASE_MARGIN_S + 1)  # fmt: skip
        timeout_s = max(1, min(role.timeout_s, int(work.lease_left(ticket)) - LEASE_MARGIN_S))
        try:
            doc = task_document(work, started)
            got = run(ProviderRequest(work.repo.top, plan.base, role, plan.run_id, doc,
                                      timeout_s=timeout_s, loaded=work.loaded,
                                      budget=budget.bounds(plan.budget)))  # fmt: skip
        except Exception as exc:
            _end_quietly(work, started, lease_token, refusal(exc).message)
            raise
        settle(work, started, lease_token, got, got.stopped)
        return _shown(work, started.id, role, got)


# -- before anything starts -------------------------------------------------------------------


def _eligible(work: Work, name: str) -> Role:
    """The role from the trusted policy, eligible for an unattended run, able to write."""
    role = roles.require(roles.resolve(work.loaded, name), unattended=True)
    if role.authority != "worktree-write":
        raise RoleUnavailable(f"role {role.name} is read-only; a ticket is dispatched to a "
                              "worktree-write role")  # fmt: skip
    return role


def _plan(work: Work, role: Role, transfer: str | None, ticket: str) -> DispatchPlan:
    """Where and on what the run goes: the default branch's commit (never the worktree or a
    caller's ref), a run id and workspace chosen now, so the envelope names them first, and
    the budget snapshot (refused when a budget is spent already)."""
    snap = budget.snapshot(work, ticket)
    budget.require_left(snap)
    base = work.base()  # the trusted mark the policy was read at
    run_id = new_run_id()
    checks = tuple(f"check:{c.name}" for c in work.loaded.policy.checks)
    return DispatchPlan(
        role=role.name, provider=role.provider, engine=role.engine, model=role.model,
        authority=role.authority, base=base, run_id=run_id,
        workspace=str(workspace_path(run_id)),
        capabilities=(role.authority, _EGRESS.get(role.engine, "egress:none")),
        acceptance=("result-gate:READY_FOR_HUMAN", *checks), transfer=transfer, budget=snap,
    )  # fmt: skip


# -- after begin_dispatch ---------------------------------------------------------------------


def task_document(work: Work, d: Dispatch) -> bytes:
    """The task as canonical JSON (RFC 8785): the dispatch, its envelope digest, the ticket,
    the attempt, the title and body (data, never argv), the acceptance criteria, and the
    previous attempt's reflection when this is a retry."""
    t = work.ticket(d.ticket)
    doc: dict[str, Any] = {
        "v": 1, "dispatch": d.id, "envelope_digest": d.envelope_digest, "ticket": t.id,
        "attempt": d.attempt, "title": t.title, "body": _text(work, t),
        "acceptance": list(d.envelope.acceptance),
    }  # fmt: skip
    if d.attempt > 1:
        previous = work.reflection(t.id, d.attempt - 1)
        doc["reflection"] = previous.decode("utf-8", "replace") if previous else None
    return bytes(rfc8785.dumps(doc))


def _text(work: Work, t: Ticket) -> str:
    if t.body.blob is None:
        return ""
    return work.store.blobs.get(t.body.blob.removeprefix("sha256:")).decode("utf-8", "replace")


def settle(work: Work, d: Dispatch, token: str, got: ProviderReceipt,
           why: str | None = None) -> None:  # fmt: skip
    """Record the run; its commit is the receipt (-> verifying), or the dispatch ends (`why`:
    the reason it ends, when the caller knows better than the exit status)."""
    facts = RunFacts(exit_code=got.exit_code, signal=got.signal, timed_out=got.timed_out,
                     candidate=got.candidate, candidate_ref=got.candidate_ref,
                     workspace=got.workspace, evidence_seq=got.evidence_seq,
                     output_sha256=str(Sha256Digest.of(got.output.encode())),
                     usage=dict(got.usage) if got.usage else None,
                     spend=Spent(requests=got.spend[0], tokens=got.spend[1])
                     if got.spend else None)  # fmt: skip
    work.record_run(d.id, token, facts)
    if got.exit_code == 0 and got.candidate is not None:
        work.file_receipt(d.id, token, new_nonce(), got.candidate, got.exit_code)
    else:
        work.end_dispatch(d.id, token, why or no_result(got))


def no_result(got: ProviderReceipt) -> str:
    """Why a run gave no receipt, in one line."""
    if got.timed_out:
        return "the worker timed out"
    if got.signal is not None:
        return f"the worker was killed by signal {got.signal}"
    if got.exit_code != 0:
        made = "a commit" if got.candidate else "no commit"
        return f"the worker exited {got.exit_code} with {made}"
    return "the worker exited 0 with no commit"


def _end_quietly(work: Work, d: Dispatch, token: str, reason: str) -> None:
    """End a dispatch whose delivery raised; when even that is refused (its lease expired
    meanwhile), the dispatch stays `started` and a new lease recovers the ticket."""
    try:
        work.end_dispatch(d.id, token, reason)
    except Exception:  # noqa: S110 # nosec B110 -- the delivery's refusal is what is raised
        pass


def _shown(work: Work, did: str, role: Role, got: ProviderReceipt) -> dict[str, Any]:
    d = work.dispatch(did)
    return {
        "dispatch": {
            "id": d.id, "attempt": d.attempt, "run_id": d.run_id, "state": d.state,
            "envelope_digest": d.envelope_digest, "role": role.name, "engine": role.engine,
            "exit_code": got.exit_code, "candidate": got.candidate, "reason": d.reason,
        },
        "ticket": work.ticket(d.ticket).to_json(),
    }  # fmt: skip


def worker_result(repo_dir: Path, dispatch_id: str, lease_token: str, nonce: str,
                  commit: str | None) -> dict[str, Any]:  # fmt: skip
    """`oms worker result`: the typed receipt, the only move to `verifying`. The commit, when
    named, must be the one this dispatch's own run produced (the fence checks it)."""
    with opened(repo_dir) as work:
        receipt, ticket = work.file_receipt(dispatch_id, lease_token, nonce, commit)
        return {"receipt": receipt.to_json(), "ticket": ticket.to_json()}
