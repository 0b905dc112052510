"""`next_actions` of a run: derived from its state, gate and artifacts; display guidance only.

The shape is the seed spec's (action, label, description, owner, blocking, required, tool,
arguments, artifactRefs, eventRefs). An action a human owns carries the exact command for
their own terminal (`command`, one copyable line, and `argv`, by absolute path so it works
from any directory); an agent's names a tool of `oms mcp` with its arguments. Nothing here
grants anything: approving is never an agent's action.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gatekeeper.integrations import oms_command
from gatekeeper.work.fence import Work
from gatekeeper.work.runs.model import Artifact, Run

OwnerKind = Literal["human", "agent", "runtime", "role"]
OWNER_LABELS: Mapping[str, str] = {
    "human": "a human, in their own terminal (an agent cannot do this)",
    "agent": "the agent, through oms' MCP tools or CLI",
    "runtime": "oms, when the run is continued",
    "role": "the role named, when the run is continued",
}
FINAL_KINDS = ("report", "plan", "reconciliation")


@dataclass(frozen=True)
class NextAction:
    action: str
    label: str
    description: str
    owner: OwnerKind
    role: str | None = None
    blocking: bool = True
    required: bool = True
    argv: tuple[str, ...] = ()
    tool: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    artifact_refs: tuple[str, ...] = ()
    event_refs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        owner: dict[str, Any] = {"kind": self.owner, "label": OWNER_LABELS[self.owner]}
        if self.role is not None:
            owner["role"] = self.role
        out: dict[str, Any] = {
            "action": self.action, "label": self.label, "description": self.description,
            "owner": owner, "blocking": self.blocking, "required": self.required,
            "artifactRefs": list(self.artifact_refs), "eventRefs": list(self.event_refs),
        }  # fmt: skip
        if self.argv:
            out["command"] = " ".join(shlex.quote(w) for w in self.argv)
            out["argv"] = list(self.argv)
        if self.tool is not None:
            out["tool"] = self.tool
            out["arguments"] = dict(self.arguments)
        return out


def human(action: str, label: str, description: str, *words: str,
          refs: Sequence[str] = ()) -> NextAction:  # fmt: skip
    return NextAction(action, label, description, "human", argv=(*oms_command(), *words),
                      artifact_refs=tuple(refs))  # fmt: skip


def agent(action: str, label: str, description: str, tool: str, arguments: Mapping[str, Any],
          *, blocking: bool = False, required: bool = False,
          refs: Sequence[str] = ()) -> NextAction:  # fmt: skip
    return NextAction(action, label, description, "agent", blocking=blocking,
                      required=required, tool=tool, arguments=dict(arguments),
                      artifact_refs=tuple(refs))  # fmt: skip


def approve_command(run_id: str) -> NextAction:
    """The one way through a gate that a human owns: `oms run continue RUN --approve`."""
    return human("approve_gate", "Approve at your terminal",
                 "A human runs this at a controlling terminal; it shows what is approved and "
                 "asks there. MCP and a CLI without a terminal cannot approve.",
                 "run", "continue", run_id, "--approve")  # fmt: skip


def derive(work: Work, run: Run, artifacts: Sequence[Artifact]) -> list[NextAction]:
    """What must happen next for `run`, most important first."""
    g = run.gate
    if run.state == "awaiting_approval" and g is not None:
        out: list[NextAction] = []
        if g.kind == "transfer":
            # The transfer gate is imported for a run waiting on one, not for every caller.
            from gatekeeper.work.runs import gates

            line = gates.approval_line(work, g)
            if line is not None:
                words = shlex.split(line)[1:]
                out.append(human("approve_transfer", "Approve the transfer at your terminal",
                                 g.reason + "; then continue the run.", *words))  # fmt: skip
            out.append(approve_command(run.id))
            out.append(agent("preview_transfer", "Read the transfer manifest",
                             "What would leave, before a human approves it.",
                             "oms_transfer_preview", {"run_id": run.id}))  # fmt: skip
        else:
            refs = (g.artifact,) if g.artifact else ()
            if refs:
                out.append(agent("read_plan", "Read the plan", "The plan to approve.",
                                 "oms_read_artifact", {"run_id": run.id, "ref": refs[0]},
                                 refs=refs))  # fmt: skip
            out.append(approve_command(run.id))
            out.append(agent("revise", "Ask for a revision", "Continue with approval "
                             "'revise' and a message: the planner plans again.",
                             "oms_continue", {"run_id": run.id, "approval": "revise",
                                              "message": "…"}))  # fmt: skip
        out.append(agent("reject", "Reject", "Continue with approval 'reject': the run fails "
                         "and nothing is sent or written.", "oms_continue",
                         {"run_id": run.id, "approval": "reject"}))  # fmt: skip
        return out
    if not run.terminal:
        return [agent("continue", "Continue the run", "Advance it to its next gate or its end.",
                      "oms_continue", {"run_id": run.id, "approval": "none"}, blocking=True,
                      required=True)]  # fmt: skip
    if run.state != "completed":
        return []
    out = []
    final = [x for x in artifacts if x.kind in FINAL_KINDS]
    if final:
        last = final[-1]
        out.append(agent("inspect_final_report", "Read the final answer", last.summary[:200],
                         "oms_read_artifact", {"run_id": run.id, "ref": last.ref},
                         refs=(last.ref,)))  # fmt: skip
    if run.ticket is not None:
        out.append(human("review_candidate", "Review the verified commit",
                         "The result gate passed it; it is on human hold and never merged "
                         "by oms.", "ticket", "show", run.ticket))  # fmt: skip
    if run.kind != "reconcile":
        out.append(agent("reconcile", "Reconcile from a progress packet", "Ask the planner "
                         "what is left, from this run's progress.", "oms_reconcile",
                         {"run_id": run.id}))  # fmt: skip
    return out
