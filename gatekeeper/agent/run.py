"""`oms agent run`: the agent in its own profile, its provider traffic through oms' broker.

The order is the promise: everything that can refuse (repository, key, policy from the
default branch, bwrap, the kind's CLI, the profile) refuses before anything starts; the
probe, the first process of CMD's own sandbox, passes (checked outside) before it hands
over to CMD, and `agent.run.start` is written in between; `agent.run.end` is written after
CMD's result is collected by oms, outside, with oms' git. Every way out after the start
entry writes the end entry, with its reason (a refusal, the collect deadline, an
interruption: signal or Ctrl-C), so that no run is left open in the log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import gatekeeper
from evidence import Draft, EvidenceStore, Payload, state_root
from gatekeeper.agent import codex_sessions, inside, logins
from gatekeeper.agent.broker_socket import LazyBroker
from gatekeeper.agent.budget import Bound, Meter, Parked
from gatekeeper.agent.collect_deadline import CollectTimeout
from gatekeeper.agent.egress_config import Provider, provider_keys, upstreams_from_env
from gatekeeper.agent.kinds import KIND_PROVIDER, KindSetup, prepare_kind, require_keys
from gatekeeper.agent.payloads import (
    RUN_ID_RE,
    AgentKind,
    AgentRunEnd,
    AgentRunStart,
    EgressMode,
    EgressTotals,
    EndReason,
    RunSpend,
    SpecialFile,
    StopFact,
    run_subject,
)
from gatekeeper.agent.setup import (
    agent_env,
    hidden_paths,
    limits_of,
    write_marker,
    write_oms_shim,
    write_task_file,
)
from gatekeeper.agent.workspace import (
    Collected,
    Workspace,
    collect,
    create_workspace,
    new_run_id,
    run_ref,
)
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, Unavailable, UsageError, refusal
from gatekeeper.gates.mark import trusted_mark
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import read_ref
from gatekeeper.scan.canary import canary_dir, canary_tokens, plant_canary
from policy import LoadedPolicy
from sandbox import Bwrap, SandboxError, find_bwrap
from sandbox.agent import AgentProfile, agent_profile, oms_install_paths, oms_masked_paths
from sandbox.agent_probe import AgentProbe, probe_and_run
from sandbox.agent_runner import AgentResult
from sandbox.quiet_dirs import QuietDirs

if TYPE_CHECKING:  # the broker's HTTP stack is imported when a broker starts (LazyBroker)
    from gatekeeper.agent.egress import Broker, ParkWatch
    from gatekeeper.agent.observe import QuotaReport
    from gatekeeper.agent.worker_route import EndRule

Mode = Literal["pty", "pipes", "output", "capture"]
_CONDUCTOR_ID = re.compile(r"^c-[0-9a-f]{12}$")  # gatekeeper.work.conductor.model's
# The source of oms itself: the relay runs from it as a file (`python -I`, stdlib only).
SOURCE = Path(gatekeeper.__file__).resolve().parent.parent


@dataclass(frozen=True)
class AgentRunRequest:
    repo_dir: Path
    cmd: tuple[str, ...]
    agent: AgentKind = "command"
    egress: EgressMode | None = None  # None: `api` for a CLI kind whose key is configured
    base_ref: str | None = None
    capture: bool = False  # --json: stdout and stderr captured, bounded
    # The orchestration's own: a run id chosen (and recorded) by the caller before the run,
    # the task on stdin (capture mode) and as the read-only file $OMS_TASK_FILE, a shorter
    # wall time than the policy's, and a read-only workspace whose result is never collected;
    # `schema_file`: a JSON schema for the answer, read-only at /run/oms/schema.json (named by
    # $OMS_SCHEMA_FILE).
    run_id: str | None = None
    stdin: bytes | None = None
    task_file: bytes | None = None
    schema_file: bytes | None = None
    timeout_s: int | None = None
    read_only: bool = False
    # The conductor's own (issue 18): `conductor` names the conductor session this run is
    # (its broker relays `oms conductor bridge|wait-event` for it); `worker` names the
    # worker pane this run is (its hooks' observations are recorded for that worker).
    conductor: str | None = None
    worker: str | None = None
    # A worker pane's non-interactive CLI (`codex exec`): its stdin /dev/null, its output the
    # pane's. `codex_sessions`: the owner-only store (under $OMS_HOME) of one ticket's Codex
    # session, seeded into the run's CODEX_HOME and saved back after (agent/codex_sessions.py).
    no_input: bool = False
    codex_sessions: Path | None = None
    # An unattended worker (issue 31): its role's name (recorded with its hook calls) and
    # the rule that ends its CLI once its receipt's commit is there and nobody is attached.
    role: str | None = None
    end_rule: EndRule | None = None
    # A worker's budgets (`[conductor.budget]`, with what earlier runs spent): the broker
    # refuses model requests past them (issue 31).
    budget: tuple[Bound, ...] = ()


class EgressCounts(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    requests: int
    forwarded: int
    redacted: int
    blocked: int
    no_key: int = 0  # refused for a provider oms holds no key for
    model_requests: int = 0  # forwarded to a model (the budget's count)
    tokens: int = 0  # provider-reported, input + output
    stopped: StopFact | None = None  # budget spent or login refused: the lane is parked


class AgentRunOutcome(BaseModel):
    """`oms agent run --json`: DESIGN.md's keys, plus the agent kind and egress mode."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    run_id: str
    agent: AgentKind
    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration_s: float
    stdout: str | None
    stderr: str | None
    workspace: str
    base: str
    candidate: str | None
    candidate_ref: str | None
    evidence_seq: int
    egress_mode: EgressMode
    egress: EgressCounts
    # FIFOs, sockets and devices the agent left: never opened, not in the candidate.
    special_files: tuple[SpecialFile, ...] = ()
    # `--egress tunnel` with a CLI kind: what became of its login (gatekeeper/agent/logins.py):
    # "saved", "unchanged", "none" or "refused: …"; None otherwise.
    login: str | None = None
    # Capture mode: stdout as kept (up to the output cap) for in-process callers such as
    # the provider adapters; never part of the JSON.
    stdout_kept: bytes | None = Field(default=None, exclude=True, repr=False)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class _Recorder:
    """Appends to the run's log from the broker's thread and the main one, one at a time."""

    def __init__(self, store: EvidenceStore, run_id: str) -> None:
        self.store, self.run_id, self._lock = store, run_id, threading.Lock()

    def append(self, payload: Payload, extra: Sequence[Mapping[str, Any]] = ()) -> int:
        draft = Draft.of(payload, subject=[*run_subject(self.run_id), *extra])
        with self._lock:
            return self.store.append(draft).seq

    def __call__(self, payload: Payload) -> None:
        """The broker's and the tunnel's record: a failure here fails their request closed."""
        self.append(payload)


@dataclass
class _Run:
    """What one run has set up so far; `ExitStack` undoes it in reverse."""

    req: AgentRunRequest
    repo: Repo
    store: EvidenceStore
    loaded: LoadedPolicy
    run_id: str
    egress: EgressMode
    bw: Bwrap
    run_dir: Path
    ws: Workspace
    kind: KindSetup
    canary: str
    record: _Recorder
    broker: Broker | LazyBroker | None = None
    totals: EgressTotals | None = None
    spend: RunSpend | None = None
    started: bool = False  # the start entry is written
    start_seq: int = 0  # its sequence number
    login_seed: bytes | None = None  # the stored login copied into the fresh config dir
    login: str | None = None  # what became of it when the agent ended


def _unless_started(run: _Run) -> None:
    """A run refused before its start entry leaves nothing behind: no workspace (the agent
    never ran in it), no canary (no run of that id exists to leak it)."""
    if not run.started:
        shutil.rmtree(run.ws.path, ignore_errors=True)
        (canary_dir() / run.run_id).unlink(missing_ok=True)


def _stop_egress(run: _Run) -> EgressTotals:
    """Stop the broker once (explicitly, or when the stack unwinds); its totals."""
    if run.broker is not None:
        run.totals, meter, run.broker = run.broker.stop(), run.broker.meter, None
        if run.egress == "api":
            spent, stopped = meter.snapshot()
            run.spend = RunSpend(requests=spent.requests, tokens=spent.tokens,
                                 stopped=_fact(stopped))  # fmt: skip
    return run.totals or EgressTotals()


def _on_park(watch: QuotaReport | None, rule: EndRule | None) -> ParkWatch | None:
    """The broker's stop: its watch parks the lane outside, and an unattended worker's end
    rule ends the CLI (every model request it makes is refused from now on; an
    interactive CLI would wait at its prompt until its time-out)."""
    if rule is None:
        return None if watch is None else watch.park

    def park(stop: Parked) -> None:
        rule.stopped.set()
        if watch is not None:
            watch.park(stop)

    return park


def _fact(stop: Parked | None) -> StopFact | None:
    if stop is None:
        return None
    return StopFact(event=stop.event, provider=stop.provider, status=stop.status,
                    scope=stop.scope, measure=stop.measure, spent=stop.spent, limit=stop.limit,
                    reason=stop.reason)  # fmt: skip


def agent_run(req: AgentRunRequest) -> AgentRunOutcome:
    """`oms agent run`: contain CMD, broker its traffic, collect its commit as a run ref."""
    _check_request(req)
    with ExitStack() as stack:
        run = _prepare(req, stack)
        profile = _profile(run)
        _start_egress(run, stack)
        result: AgentResult | None = None
        try:
            with _interrupts_refused():
                try:  # the probe first, in the same sandbox: `_probe` records the start
                    result = _execute(run, profile)
                finally:  # a refreshed login is kept however the agent ended
                    if run.started:
                        run.login = logins.save(req.agent, run.egress, run.run_dir / "home",
                                                run.login_seed)  # fmt: skip
                    if run.started and req.agent == "codex" and req.codex_sessions is not None:
                        codex_sessions.save(req.codex_sessions, run.run_dir / "home")
                collected = _collect(run)
        except BaseException as exc:  # Ctrl-C included: the end entry is written on every way out
            if not run.started:  # refused before CMD could start: no start entry, no end
                raise
            end_seq = _record_end(run, result, _stop_egress(run), None, failure=exc)
            if not isinstance(exc, Exception):
                raise
            raise refusal(exc, {"run_id": run.run_id, "evidence_seq": end_seq,
                                "start_seq": run.start_seq}) from exc  # fmt: skip
        totals = _stop_egress(run)
        end_seq = _record_end(run, result, totals, collected)
        return _outcome(run, result, totals, collected, end_seq)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack does not swallow


def _check_request(req: AgentRunRequest) -> None:
    if not req.cmd:
        raise UsageError("no command given; use: oms agent run --repo DIR -- CMD…")
    if req.run_id is not None and not RUN_ID_RE.fullmatch(req.run_id):
        raise UsageError(f"not a run id: {req.run_id[:40]!r} (want 20261201T150000Z-0a1b2c3d)")
    if req.stdin is not None and not req.capture:
        raise UsageError("an agent's input on stdin needs capture mode")
    if req.timeout_s is not None and req.timeout_s < 1:
        raise UsageError("an agent's timeout is at least 1 s")
    if req.conductor is not None and not _CONDUCTOR_ID.fullmatch(req.conductor):
        raise UsageError(f"not a conductor session id: {req.conductor[:40]!r}")


def _collect(run: _Run) -> Collected:
    """A read-only run's workspace is never read back: it has no candidate, whatever it
    holds (its bind is read-only as well, and the probe checked that)."""
    if run.req.read_only:
        return Collected(None, None, None)
    return collect(run.repo, run.ws)


class AgentInterrupted(Unavailable):
    """SIGTERM or SIGHUP reached oms while the agent ran or its result was collected: the
    agent was stopped, nothing of its workspace is collected, and the end entry says so."""


@contextmanager
def _interrupts_refused() -> Iterator[None]:
    """While CMD runs and is collected, SIGTERM and SIGHUP raise AgentInterrupted in the main
    thread, so that the sandbox is torn down and `agent.run.end` is written (the default
    would just die)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise AgentInterrupted(f"interrupted by {signal.Signals(signum).name}; the agent "
                               "was stopped and nothing was collected")  # fmt: skip

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _prepare(req: AgentRunRequest, stack: ExitStack) -> _Run:
    repo = open_repo(req.repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail closed before anything runs when the key is unusable
    # The agent profile comes from the default branch's trusted mark, never the agent's base.
    loaded = read_policy_at(repo.top, trusted_mark(store, repo).commit)
    held = provider_keys(os.environ, state_root()).held()
    egress = _egress_mode(req, held)
    require_keys(req.agent, egress, held)  # before anything is made or started
    try:
        bw = find_bwrap()
    except SandboxError as exc:
        raise Unavailable(f"sandbox unavailable: {exc}") from None
    run_id = req.run_id or new_run_id()
    if read_ref(repo, run_ref(run_id)) is not None:
        raise Blocked(f"run {run_id} exists already: a run id is used once")
    # Short and private: unix socket paths are limited to 107 bytes.
    run_dir = Path(tempfile.mkdtemp(prefix="oms-agent-"))
    stack.callback(shutil.rmtree, run_dir, True)
    (run_dir / "oms").mkdir()
    (run_dir / "home").mkdir()
    kind = prepare_kind(req.agent, req.cmd, run_dir=run_dir, egress=egress,
                        relay_url=f"http://127.0.0.1:{inside.RELAY_PORT}",
                        oms_mcp_argv=inside_oms_argv(*_mcp_args(req)),
                        search_path=os.environ.get("PATH", os.defpath), held=held)  # fmt: skip
    write_marker(run_dir / "oms" / "run.json", run_id, req.worker, req.end_rule is not None)
    if req.task_file is not None:
        write_task_file(run_dir / "oms" / "task.json", req.task_file)
    if req.schema_file is not None:
        write_task_file(run_dir / "oms" / "schema.json", req.schema_file)
    write_oms_shim(run_dir / "oms" / "bin", inside_oms_argv())
    ws = create_workspace(repo, req.base_ref, run_id)
    run = _Run(req, repo, store, loaded, run_id, egress, bw, run_dir, ws, kind, "",
               _Recorder(store, run_id))  # fmt: skip
    stack.callback(_unless_started, run)
    run.canary = plant_canary(run_id)
    run.login_seed = logins.seed(req.agent, egress, run_dir / "home")
    if req.agent == "codex" and req.codex_sessions is not None:
        codex_sessions.seed(req.codex_sessions, run_dir / "home")
    return run


def _mcp_args(req: AgentRunRequest) -> tuple[str, ...]:
    """The in-sandbox MCP server the kind's strict config names: the conductor's bridge for
    a conductor session (its only server), else `oms mcp`."""
    if req.conductor is not None:
        return ("conductor", "bridge", "--session", req.conductor)
    return ("mcp",)


def _egress_mode(req: AgentRunRequest, held: Collection[Provider]) -> EgressMode:
    if req.egress is not None:
        return req.egress
    if req.agent == "command":
        return "none"
    return "api" if KIND_PROVIDER[req.agent] in held else "none"


def inside_oms_argv(*args: str) -> list[str]:
    """`oms ARGS` as it runs inside: oms' own interpreter and source, nothing of the agent's."""
    boot = (f"import sys; sys.path.insert(0, {str(SOURCE)!r}); "
            "from gatekeeper.cli.main import main; main()")  # fmt: skip
    return [sys.executable, "-I", "-c", boot, *args]


def _profile(run: _Run) -> AgentProfile:
    pol = run.loaded.policy.agent
    env = agent_env(run.run_id, run.egress, run.kind, pol.env_allow, os.environ)
    if run.req.task_file is not None:
        env["OMS_TASK_FILE"] = inside.TASK_FILE
    if run.req.schema_file is not None:
        env["OMS_SCHEMA_FILE"] = inside.SCHEMA_FILE
    ro = [*oms_install_paths(), *run.kind.ro_paths, *pol.ro_paths]
    never = [state_root(), run.repo.top, run.repo.common_dir]
    limits, quiet = limits_of(pol), QuietDirs(state_root() / "cache" / "quiet-dirs.json")
    if run.req.timeout_s is not None:
        limits = replace(limits, wall_s=min(limits.wall_s, run.req.timeout_s))
    try:
        return agent_profile(limits, ro, env, never, placeholders=run.kind.placeholders,
                             masked=oms_masked_paths(),
                             workspace_readonly=run.req.read_only,
                             quiet=quiet)  # fmt: skip
    except SandboxError as exc:
        raise refusal(exc) from None


def _start_egress(run: _Run, stack: ExitStack) -> None:
    """The broker: at once for model egress, else on the first connection to its socket (a
    run that never calls its routes imports no HTTP stack). A tunnel beside it if asked."""
    uid, meter = sandbox_uid(), Meter(bounds=run.req.budget)
    path = run.run_dir / "oms" / "broker.sock"
    if run.egress == "none":
        run.broker = LazyBroker(path, uid, meter, lambda sock: _broker(run, path, uid, meter,
                                                                       sock))  # fmt: skip
        run.broker.start()
    else:
        run.broker = _broker(run, path, uid, meter)
    stack.callback(_stop_egress, run)
    if run.egress == "tunnel":
        from gatekeeper.agent.tunnel import Tunnel, connect_overrides

        tunnel = Tunnel(run.run_dir / "oms" / "tunnel.sock", run_id=run.run_id,
                        record=run.record, overrides=connect_overrides(os.environ),
                        socket_uid=uid)  # fmt: skip
        tunnel.start()
        stack.callback(tunnel.stop)


def _broker(run: _Run, path: Path, uid: int | None, meter: Meter,
            sock: socket.socket | None = None) -> Broker:  # fmt: skip
    """The run's broker with its routes, started (on `sock` when it is bound already)."""
    from gatekeeper.agent.egress import Broker
    from gatekeeper.agent.mcp_relay import conductor_routes, mcp_route
    from gatekeeper.agent.observe import observe_routes, quota_report
    from gatekeeper.agent.worker_route import worker_routes

    routes = [mcp_route(repo_top=run.repo.top, run_id=run.run_id, oms_argv=oms_outside_argv())]
    routes += observe_routes(repo_top=run.repo.top, run_id=run.run_id, worker=run.req.worker,
                             python_argv=outside_python_argv())  # fmt: skip
    routes += worker_routes(run_id=run.run_id, worker=run.req.worker, role=run.req.role,
                            workspace=run.ws.path, base=run.ws.base, record=run.record,
                            rule=run.req.end_rule)  # fmt: skip
    if run.req.conductor is not None:  # a conductor's run: its bridge and waiter, outside
        routes += conductor_routes(repo_top=run.repo.top, run_id=run.run_id,
                                   conductor=run.req.conductor,
                                   oms_argv=oms_outside_argv())  # fmt: skip
    watch = quota_report(repo_top=run.repo.top, run_id=run.run_id, worker=run.req.worker,
                         python_argv=outside_python_argv())  # fmt: skip
    broker = Broker(path, run_id=run.run_id, egress=run.egress,
                    keys=provider_keys(os.environ, state_root()),
                    upstreams=upstreams_from_env(os.environ),
                    on_secret=run.loaded.policy.agent.egress.on_secret, loaded=run.loaded,
                    canaries=canary_tokens(), record=run.record, socket_uid=uid,
                    routes=routes, on_response=watch, meter=meter,
                    on_park=_on_park(watch, run.req.end_rule))  # fmt: skip
    broker.start(sock)
    return broker


def sandbox_uid() -> int | None:
    """The host uid the agent runs as: oms' own, or the unprivileged one when oms is root."""
    from sandbox.runner import SANDBOX_HOST_UID

    return SANDBOX_HOST_UID if os.geteuid() == 0 else None


def outside_python_argv() -> list[str]:
    """`python` as the broker runs one of oms' own modules outside (`-m MODULE ARGS` after
    it, as python takes them): this interpreter, isolated, this oms' source first, for the
    reason `oms_outside_argv` gives."""
    boot = (f"import runpy, sys; sys.path.insert(0, {str(SOURCE)!r}); del sys.argv[:2]; "
            "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")  # fmt: skip
    return [sys.executable, "-I", "-c", boot]


def oms_outside_argv() -> list[str]:
    """How the broker starts `oms …` outside for a brokered operation: this very oms, its
    interpreter and its source (as inside), never whichever `gatekeeper` that interpreter
    would import: a conductor pane runs oms isolated (`-I`), so no PYTHONPATH reaches here."""
    return inside_oms_argv()


def _probe(run: _Run, profile: AgentProfile, probed: AgentProbe) -> None:
    """The probe's report, checked, while it waits in the agent's sandbox: refused, or the
    start entry written (then the probe hands over to CMD)."""
    if not probed.ok:
        raise Unavailable(f"agent sandbox probe failed: {'; '.join(probed.failures)}")
    run.start_seq = _record_start(run, profile, probed)
    run.started = True  # from here on, the workspace and the canary are the run's


def _record_start(run: _Run, profile: AgentProfile, probed: AgentProbe) -> int:
    start = AgentRunStart(
        run_id=run.run_id, agent=run.req.agent, cli_version=run.kind.cli_version,
        argv_digest=str(Sha256Digest.of("\0".join(run.kind.argv).encode())),
        profile_digest=profile.digest, mountinfo_digest=probed.mountinfo_digest,
        namespaces_digest=probed.namespaces_digest, probe="passed", base=run.ws.base,
        base_ref=run.ws.base_ref, workspace=str(run.ws.path), egress=run.egress,
        canary_digest=str(Sha256Digest.of(run.canary.encode())),
        agent_flags=run.kind.agent_flags,
    )  # fmt: skip
    return run.record.append(start, _commit_subject(run.repo, run.ws.base))


def _commit_subject(repo: Repo, sha: str) -> list[dict[str, Any]]:
    return [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": sha}}]


def _mode(req: AgentRunRequest) -> Mode:
    if req.capture:
        return "capture"
    if req.no_input:
        return "output"
    if sys.stdin.isatty() and sys.stdout.isatty():
        return "pty"
    return "pipes"


def _execute(run: _Run, profile: AgentProfile) -> AgentResult:
    forwards = ["--forward", f"{inside.RELAY_PORT}={inside.SOCKET}"]
    if run.egress == "tunnel":
        forwards += ["--forward", f"{inside.TUNNEL_PORT}={inside.TUNNEL_SOCKET}"]
    relay = str(SOURCE / "gatekeeper" / "agent" / "relay.py")
    cmd = [sys.executable, "-I", relay, *forwards, "--", *run.kind.argv]
    rule, finished = run.req.end_rule, threading.Event()
    spawned = None if rule is None else (lambda pid: rule.watch(pid, finished))
    hidden = hidden_paths(run.repo, profile, os.environ)
    try:
        return probe_and_run(profile, run.bw, workspace=run.ws.path, run_dir=run.run_dir,
                             hidden=hidden, cmd=cmd, mode=_mode(run.req), stdin=run.req.stdin,
                             on_spawn=spawned,
                             on_probed=lambda probed: _probe(run, profile, probed))  # fmt: skip
    except SandboxError as exc:
        if not run.started:
            raise Unavailable(f"agent sandbox probe could not run: {exc}") from None
        raise Unavailable(f"the agent sandbox could not run the command: {exc}") from None
    finally:
        finished.set()


def _end_reason(run: _Run, failure: BaseException | None) -> EndReason:
    if isinstance(failure, CollectTimeout):
        return "collect_timeout"
    if isinstance(failure, (AgentInterrupted, KeyboardInterrupt)):
        return "interrupted"
    if failure is not None:
        return "refused"
    return "read_only" if run.req.read_only else "collected"


def _record_end(run: _Run, result: AgentResult | None, totals: EgressTotals,
                collected: Collected | None,
                failure: BaseException | None = None) -> int:  # fmt: skip
    refused = None if failure is None else str(failure) or type(failure).__name__
    if isinstance(failure, KeyboardInterrupt):
        refused = "interrupted by Ctrl-C; the agent was stopped and nothing was collected"
    end = AgentRunEnd(
        run_id=run.run_id,
        exit_code=result.exit_code if result else None,
        signal=result.signal if result else None,
        duration_s=result.duration_s if result else 0.0,
        egress=totals, base=run.ws.base,
        candidate=collected.candidate if collected else None,
        candidate_ref=collected.candidate_ref if collected else None,
        diffstat=collected.diffstat if collected else None,
        refused=refused[:300] if refused else None,
        reason=_end_reason(run, failure),
        special_files=collected.special if collected else (),
        special_total=collected.special_total if collected else 0,
        spend=run.spend,
    )  # fmt: skip
    made = collected.candidate if collected else None
    return run.record.append(end, _commit_subject(run.repo, made) if made else [])


def _spend_counts(spend: RunSpend | None) -> dict[str, Any]:
    if spend is None:
        return {}
    return {"model_requests": spend.requests, "tokens": spend.tokens, "stopped": spend.stopped}


def _outcome(run: _Run, result: AgentResult, totals: EgressTotals, collected: Collected,
             seq: int) -> AgentRunOutcome:  # fmt: skip
    return AgentRunOutcome(
        run_id=run.run_id, agent=run.req.agent, exit_code=result.exit_code,
        signal=result.signal, timed_out=result.timed_out, duration_s=result.duration_s,
        stdout=result.stdout.display() if result.stdout else None,
        stderr=result.stderr.display() if result.stderr else None,
        stdout_kept=result.stdout.kept if result.stdout else None,
        workspace=str(run.ws.path), base=run.ws.base, candidate=collected.candidate,
        candidate_ref=collected.candidate_ref, evidence_seq=seq, egress_mode=run.egress,
        egress=EgressCounts(requests=totals.requests, forwarded=totals.forwarded,
                            redacted=totals.redacted, blocked=totals.blocked,
                            no_key=totals.no_key, **_spend_counts(run.spend)),
        special_files=collected.special, login=run.login,
    )  # fmt: skip
