"""What the evidence says about an agent run, for the gates that judge its result.

`oms process-result --candidate refs/oms/runs/<id>` compares the candidate with the base the
run cloned, as `agent.run.start` / `agent.run.end` recorded it, never with what the run's
ref or workspace say about themselves.
"""

from __future__ import annotations

import re

from evidence import EvidenceStore, state_root
from gatekeeper.agent.payloads import AgentRunEnd, AgentRunStart
from gatekeeper.errors import NotFound, Tampered, UsageError
from gatekeeper.gates.mark import trusted_mark
from gatekeeper.repo.git import Repo, is_ancestor
from gatekeeper.repo.refs import default_branch, read_ref

_RUN_REF = re.compile(r"^(refs/)?oms/runs/([0-9]{8}T[0-9]{6}Z-[0-9a-f]{8})$")


def run_of_ref(repo: Repo, candidate_ref: str) -> str | None:
    """The run id a candidate ref names: `refs/oms/runs/<id>`, or `oms/runs/<id>` when git
    would resolve that short name to it; None for any other ref."""
    m = _RUN_REF.match(candidate_ref)
    if m is None:
        return None
    if m.group(1) is None and read_ref(repo, f"refs/{candidate_ref}") is None:
        return None  # `oms/runs/…` is then some other ref (a branch of that name)
    return m.group(2)


def recorded_base(repo: Repo, candidate_ref: str) -> str | None:
    """For a run's ref, the base its evidence recorded; None for any other ref.

    NotFound when the log holds no start or end of that run; Tampered when they disagree;
    UsageError when the default branch does not contain it (the gate's rule for a named base);
    None too when it is on the default branch after the trusted mark: the gate's own base
    (from the mark) then judges the commits no one judged between them as well.
    """
    run = run_of_ref(repo, candidate_ref)
    if run is None:
        return None
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    bases = {p.base for _, p in store.payloads(AgentRunEnd) if p.run_id == run}
    bases |= {p.base for _, p in store.payloads(AgentRunStart) if p.run_id == run}
    if not bases:
        raise NotFound(f"no evidence of agent run {run} in this repository's log; "
                       "name the base to judge it against with --base")  # fmt: skip
    if len(bases) > 1:
        raise Tampered(f"the evidence of agent run {run} records more than one base")
    base = bases.pop()
    # The gate takes it as a named base, which must be trusted history: say so plainly here.
    if is_ancestor(repo, base, trusted_mark(store, repo).commit):
        return base
    if is_ancestor(repo, base, default_branch(repo)):
        return None  # after the mark: the gate judges from the mark, those commits too
    raise UsageError(f"agent run {run} started from {base[:12]}, which the default branch "
                     "does not contain; name a base on it with --base")  # fmt: skip
