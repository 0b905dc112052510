"""The signers a policy lists (`[trust] signers`): whether a key may vouch for a verdict at
a time, and `oms policy signer add|remove`, which edit the worktree's `oms.toml`.

A key is a signer only while an entry names it in the policy the caller trusts (the default
branch's, at its trusted mark): removing the entry revokes the key for every verdict, old
ones too; rotation is two entries whose windows (`not_before`, `not_after`: whole UTC
days) meet. The edit never commits: the human commits it, then trusts the new tip
(`oms policy trust`), as for any policy change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any, Literal

import tomlkit
from pydantic import BaseModel, ConfigDict, ValidationError
from tomlkit.items import AoT, Array, Table

from evidence import load_key, state_root
from gatekeeper.errors import UsageError
from gatekeeper.repo.git import open_repo
from policy import (
    POLICY_FILE,
    LoadedPolicy,
    PolicyError,
    Signer,
    parse_policy,
    signer_key_text,
)

SignerState = Literal["trusted", "unlisted", "not_yet_valid", "expired"]


@dataclass(frozen=True)
class SignerCheck:
    """Whether a key was a trusted signer at a time: `signer` when it was, else None and
    `reason` says why, in one line naming the policy it was read from."""

    state: SignerState
    signer: Signer | None
    reason: str

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"


def _start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def trusted_signer(loaded: LoadedPolicy, public_key: bytes, at: datetime) -> SignerCheck:
    """Is the raw Ed25519 `public_key` a signer of `loaded` at `at` (timezone-aware)?
    A window is inclusive: from 00:00 UTC of `not_before` to the end of `not_after`."""
    if at.tzinfo is None:
        raise ValueError("a signer is checked at a timezone-aware time")
    key = signer_key_text(public_key)
    found = next((s for s in loaded.policy.trust.signers if s.key == key), None)
    when = f"in {loaded.origin}; the time is {at.astimezone(UTC).isoformat(timespec='seconds')}"
    if found is None:
        return SignerCheck("unlisted", None, f"key {key} is not a signer in {loaded.origin} "
                           "(never listed, or removed: revoked)")  # fmt: skip
    if found.not_before is not None and at < _start(found.not_before):
        why = f"signer {found.name} is valid from {found.not_before} {when}"
        return SignerCheck("not_yet_valid", None, why)
    if found.not_after is not None and at >= _start(found.not_after + timedelta(days=1)):
        why = f"signer {found.name} expired after {found.not_after} {when}"
        return SignerCheck("expired", None, why)
    return SignerCheck("trusted", found, f"signer {found.name} in {loaded.origin}")


# -- oms policy signer add|remove ---------------------------------------------------------


class SignerEdited(BaseModel):
    """`oms policy signer add|remove`: the worktree's oms.toml now lists (or no longer
    lists) `name`; `digest` is the edited policy's. Nothing was committed."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    action: Literal["added", "removed"]
    path: str
    name: str
    key: str
    not_before: str | None
    not_after: str | None
    digest: str
    next_steps: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _worktree_policy(repo_dir: Path) -> tuple[Path, str]:
    """The worktree's oms.toml, a regular file (never through a symlink), and valid."""
    from gatekeeper.gates.policy_file import read_regular_file  # not on the verifier's path

    path = open_repo(repo_dir).top / POLICY_FILE
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink; oms never writes through one")
    data = read_regular_file(path, follow=False)
    parse_policy(data, str(path))  # an invalid file is fixed first (`oms policy check`)
    return path, data.decode("utf-8")


def _signers(doc: tomlkit.TOMLDocument, create: bool) -> AoT | Array | None:
    trust = doc.get("trust")
    if trust is None and create:
        trust = tomlkit.table()
        doc.add("trust", trust)
    if trust is None:
        return None
    if "signers" not in trust and create:
        trust["signers"] = tomlkit.array().multiline(True)
    found = trust.get("signers")
    return found if isinstance(found, AoT | Array) else None


def _entry(name: str, key: str, not_before: date | None, not_after: date | None) -> dict[str, str]:
    entry = {"name": name, "key": key}
    for field, day in (("not_before", not_before), ("not_after", not_after)):
        if day is not None:
            entry[field] = day.isoformat()  # the quoted form the docs show
    return entry


def _write(path: Path, doc: tomlkit.TOMLDocument) -> LoadedPolicy:
    text = tomlkit.dumps(doc)
    try:
        loaded = parse_policy(text.encode(), str(path))
    except PolicyError as exc:
        raise UsageError(f"the edited policy would not be valid, nothing written: {exc}") from None
    from gatekeeper.gates.policy_file import write_regular_file

    write_regular_file(path, text.encode(), force=True)
    return loaded


def _next_steps(path: Path) -> tuple[str, ...]:
    return (f"review {path}, then commit it on the default branch (the gates read it there)",
            "oms policy trust   # at a terminal: shows the policy's diff; yes moves the "
            "trusted mark to it")  # fmt: skip


def add_signer(repo_dir: Path, name: str, key: str | None, not_before: date | None,
               not_after: date | None) -> SignerEdited:  # fmt: skip
    """Write a `[trust] signers` entry into the worktree's oms.toml (default key: this
    state root's evidence key), keeping every other byte of the file."""
    key = signer_key_text(load_key(state_root()).public_raw) if key is None else key
    entry = _signer(_entry(name, key, not_before, not_after))
    path, text = _worktree_policy(repo_dir)
    doc = tomlkit.parse(text)
    signers = _signers(doc, create=True)
    if signers is None:
        raise UsageError(f"{path}: trust.signers is not a list of tables; edit it by hand")
    for other in signers:
        if other.get("name") == name or other.get("key") == key:
            raise UsageError(f"{path}: signer {other.get('name')} is listed already with "
                             "this name or key; remove it first")  # fmt: skip
    item = _entry(name, key, not_before, not_after)
    if isinstance(signers, AoT):
        signers.append(_table(item))
    else:
        inline = tomlkit.inline_table()
        inline.update(item)
        signers.append(inline)
    loaded = _write(path, doc)
    return _edited("added", path, entry, loaded)


def _signer(item: dict[str, str]) -> Signer:
    try:
        return Signer.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f" {p}" for p in first["loc"])
        raise UsageError(f"signer{where}: {first['msg'].removeprefix('Value error, ')}") from None


def _table(item: dict[str, str]) -> Table:
    table = tomlkit.table()
    table.update(item)
    return table


def remove_signer(repo_dir: Path, name: str) -> SignerEdited:
    """Take the entry `name` out of the worktree's oms.toml: once committed and trusted,
    its key is revoked for every verdict, past ones too."""
    path, text = _worktree_policy(repo_dir)
    before = parse_policy(text.encode(), str(path)).policy.trust.signers
    entry = next((s for s in before if s.name == name), None)
    doc = tomlkit.parse(text)
    signers = _signers(doc, create=False)
    if entry is None or signers is None:
        raise UsageError(f"{path}: no signer named {name}")
    index = next(i for i, s in enumerate(signers) if s.get("name") == name)
    del signers[index]
    return _edited("removed", path, entry, _write(path, doc))


def _edited(action: Literal["added", "removed"], path: Path, entry: Signer,
            loaded: LoadedPolicy) -> SignerEdited:  # fmt: skip
    return SignerEdited(
        action=action, path=str(path), name=entry.name, key=entry.key,
        not_before=entry.not_before and entry.not_before.isoformat(),
        not_after=entry.not_after and entry.not_after.isoformat(),
        digest=loaded.digest, next_steps=_next_steps(path),
    )  # fmt: skip
