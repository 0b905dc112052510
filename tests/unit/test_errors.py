"""The one error family and the one table of exit codes (gatekeeper/errors.py).

Every kind has its exit code (DESIGN.md, command contract); every refusal class in
gatekeeper, and every foundation error, lands on a kind; `refusal()` never loses the
kind or the data of what it wraps; anything else is a bug, reported as internal (4).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import pytest

import gatekeeper
from evidence import (
    EntryNotFound,
    KeyUnavailable,
    NotInitialised,
    StoreUnavailable,
    TamperDetected,
    TornTail,
)
from gatekeeper.errors import (
    EXIT_CODES,
    Blocked,
    ConfigError,
    InternalError,
    NotFound,
    OmsError,
    Tampered,
    Unavailable,
    UsageError,
    classify,
    known_kind,
    refusal,
)
from gatekeeper.repo.fsread import FileRefused, LinkRefused, Missing, NotRegular, TooLarge
from gatekeeper.repo.remote import RemoteRefused
from policy import PolicyError
from sandbox import ProfileError, SandboxUnavailable
from sandbox.deadline import BudgetExpired

# DESIGN.md: 2 usage/configuration, 3 blocked by policy or tampering, 4 unavailable,
# 130 interrupted by the user (Ctrl-C).
WANT_EXIT = {"usage": 2, "policy": 2, "not_found": 2, "blocked": 3, "tampered": 3,
             "unavailable": 4, "internal": 4, "interrupted": 130}  # fmt: skip


def test_every_kind_has_its_exit_code() -> None:
    assert dict(EXIT_CODES) == WANT_EXIT


FOUNDATION: list[tuple[BaseException, str]] = [
    (PolicyError("oms.toml: unknown key"), "policy"),
    (ProfileError("bad mount"), "policy"),
    (EntryNotFound("no entry 9"), "not_found"),
    (TamperDetected("prev mismatch", seq=3), "tampered"),
    (StoreUnavailable("read-only"), "unavailable"),
    (NotInitialised("oms init first"), "unavailable"),
    (KeyUnavailable("no key"), "unavailable"),
    (TornTail("torn"), "unavailable"),
    (SandboxUnavailable("no bwrap"), "unavailable"),
    (BudgetExpired("out of time"), "unavailable"),
]


@pytest.mark.parametrize(("exc", "kind"), FOUNDATION, ids=lambda x: type(x).__name__)
def test_every_foundation_error_lands_on_its_kind(exc: BaseException, kind: str) -> None:
    assert classify(exc) == (WANT_EXIT[kind], kind)
    out = refusal(exc)
    assert out.kind == kind and out.exit_code == WANT_EXIT[kind]
    assert out.message == str(exc) and out.__cause__ is exc


def _gatekeeper_refusals() -> set[type[OmsError]]:
    for mod in pkgutil.walk_packages(gatekeeper.__path__, "gatekeeper."):
        if not mod.name.endswith(".__main__"):  # runs the CLI
            importlib.import_module(mod.name)
    seen: set[type[OmsError]] = set()
    todo = [OmsError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("gatekeeper.") and sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen


# Refusal classes whose constructor is not (message): how to make one with two lines.
SPECIAL: dict[type[OmsError], Callable[[str], OmsError]] = {
    FileRefused: lambda m: FileRefused("a/b", m),
    Missing: lambda m: Missing("a/b", m),
    LinkRefused: lambda m: LinkRefused("a/b", m),
    NotRegular: lambda m: NotRegular("a/b", m),
    TooLarge: lambda m: TooLarge("a/b\nc", 2, 1),
}


# Every OmsError subclass in gatekeeper and its kind. A new refusal class is added here
# with its kind, so that its exit code is a decision and not an accident.
KINDS = {
    "UsageError": "usage", "ConfigError": "policy", "NotFound": "not_found",
    "Blocked": "blocked", "Tampered": "tampered", "Unavailable": "unavailable",
    "InternalError": "internal", "Interrupted": "interrupted",
    "GitError": "usage", "ScratchError": "usage", "ScratchLimit": "usage",
    "ScratchCleanupError": "unavailable", "RemoteRefused": "blocked",
    "ChangeTooLarge": "blocked", "FileRefused": "usage", "Missing": "usage",
    "LinkRefused": "usage", "NotRegular": "usage", "TooLarge": "usage",
    "ScannerUnavailable": "unavailable", "GateInterrupted": "unavailable",
    "AgentInterrupted": "unavailable", "ToolchainUnavailable": "unavailable",
    "HookInputError": "usage",
    # orchestration (gatekeeper/work)
    "WorkDbUnavailable": "unavailable", "StaleVersion": "blocked", "NonceReplayed": "blocked",
    "LeaseRefused": "blocked", "WrongState": "blocked", "AttemptsExhausted": "blocked",
    "ReceiptRefused": "blocked", "RoleUnavailable": "unavailable", "TransferRefused": "blocked",
    "NoReadyVerdict": "blocked",
    "LaneParked": "blocked",
    "ApprovalRefused": "blocked", "RunFinished": "blocked", "TransferBlocked": "blocked",
    # the conductor and events (issue 18)
    "GitHubUnavailable": "unavailable", "RateLimited": "unavailable",
    "WaiterBusy": "blocked", "WaiterGone": "blocked", "AlreadyConsumed": "blocked",
    "DeliveryFailed": "blocked", "ObservationRefused": "blocked", "BudgetSpent": "blocked",
    "IntentRefused": "blocked", "AdviceRefused": "blocked", "TeamIncomplete": "blocked",
    "TmuxUnavailable": "unavailable",
    # hardening, third pass (issue 29)
    "CollectTimeout": "blocked", "PatchError": "usage", "CannotRebuild": "unavailable",
    "SyncRunning": "unavailable", "ForeignRun": "blocked", "TooSlow": "unavailable",
    # delivery resumes (issue 31)
    "Transient": "unavailable", "DeliveryStopped": "unavailable", "GhTransient": "unavailable",
    # provenance notes published (issue 32)
    "NotesRaceLost": "unavailable",
}  # fmt: skip


def test_every_refusal_class_in_gatekeeper_has_its_kind_and_a_one_line_message() -> None:
    classes = _gatekeeper_refusals()
    names = {c.__name__ for c in classes}
    assert names >= set(KINDS), set(KINDS) - names
    unknown = names - set(KINDS)
    assert not unknown, f"refusal classes with no kind pinned here: {sorted(unknown)}"
    for cls in classes:
        make = SPECIAL.get(cls, cls)
        err = make("first line\nsecond line")
        assert err.kind == KINDS[cls.__name__], cls
        assert err.exit_code == WANT_EXIT[err.kind], cls
        assert "\n" not in err.message and err.message, cls
        assert known_kind(err) is cls
        assert refusal(err) is err  # already a refusal: passed on as it is


def test_refusal_keeps_the_kind_and_merges_the_data() -> None:
    inner = RemoteRefused("remote URL refused: 'ext::x'", data={"seq": 4})
    out = refusal(inner, {"decision": "BLOCKED"})
    assert out.kind == "blocked" and out.exit_code == 3
    assert isinstance(out, Blocked) and out.__cause__ is inner
    assert out.data == {"seq": 4, "decision": "BLOCKED"}
    assert out.message == "remote URL refused: 'ext::x'"


def test_refusal_gives_foundation_errors_the_data_they_are_shown_with() -> None:
    out = refusal(TamperDetected("checkpoint mismatch", seq=2), {"evidence_seq": 7})
    assert isinstance(out, Tampered) and out.data == {"evidence_seq": 7}


def test_data_is_copied_so_the_caller_cannot_change_a_refusal_after_it_is_made() -> None:
    data = {"seq": 1}
    err = Unavailable("store read-only", data=data)
    data["seq"] = 2
    assert err.data == {"seq": 1}


@pytest.mark.parametrize("bug", [KeyError("x"), ValueError("bad\nvalue"), RuntimeError()])
def test_a_bug_is_an_internal_error_that_exits_4(bug: Exception) -> None:
    assert classify(bug) is None and known_kind(bug) is None
    out = refusal(bug, {"seq": 3})
    assert isinstance(out, InternalError)
    assert out.kind == "internal" and out.exit_code == 4
    assert out.data == {"seq": 3}
    assert out.message.startswith(type(bug).__name__) and "\n" not in out.message


def test_an_empty_message_falls_back_to_the_kind() -> None:
    assert UsageError("").message == "usage"
    assert ConfigError("").message == "policy"
    assert NotFound("").exit_code == 2
