"""Every problem of a policy file at once, for `oms policy check`, with a did-you-mean.

`parse_policy` stops at the first fault with one line, which is what a gate needs. A
person fixing a file before committing it wants all of them: each validation error with
its key path (`checks[0].timeout_s`) and, for a misspelt key, the closest field name the
model has at that level (difflib). Text that cannot be parsed at all (size, limits, TOML
syntax) is one issue, as `parse_policy` reports it.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import PolicyError
from .load import LoadedPolicy, _clean, check_limits, parse_policy
from .model import Policy

_WHERE = re.compile(r"^(?P<loc>\d+(?::\d+)?): (?P<msg>.*)$")


@dataclass(frozen=True)
class PolicyIssue:
    """One problem: where (a key path, or `line:col` for a syntax error), what, and the
    key that was probably meant."""

    loc: str
    message: str
    suggestion: str | None = None

    def line(self, origin: str) -> str:
        where = f"{origin}:{self.loc}" if self.loc else origin
        hint = f" (did you mean `{self.suggestion}`?)" if self.suggestion else ""
        return _clean(f"{where}: {self.message}{hint}")

    def to_json(self) -> dict[str, Any]:
        return {"loc": self.loc, "message": self.message, "suggestion": self.suggestion}


@dataclass(frozen=True)
class PolicyReport:
    """The issues of one file; `loaded` is the validated policy when there are none."""

    origin: str
    issues: tuple[PolicyIssue, ...]
    loaded: LoadedPolicy | None

    @property
    def valid(self) -> bool:
        return not self.issues


def check_policy_text(data: bytes, origin: str) -> PolicyReport:
    """Validate policy bytes and report every issue (none: the policy, as a gate reads it)."""
    try:
        loaded = parse_policy(data, origin)
    except PolicyError as exc:
        return PolicyReport(origin, _issues(data, origin, exc), None)
    return PolicyReport(origin, (), loaded)


def _issues(data: bytes, origin: str, first: PolicyError) -> tuple[PolicyIssue, ...]:
    # Past the size, encoding and lexical limits and TOML syntax, the fault is validation,
    # and pydantic knows every error at once; before that, parse_policy's line is all.
    try:
        text = data.decode("utf-8")
        check_limits(text, origin)
        Policy.model_validate(tomllib.loads(text))
    except ValidationError as exc:
        return tuple(_issue(err) for err in exc.errors())
    except (PolicyError, ValueError, RecursionError, MemoryError):
        pass  # UnicodeDecodeError and TOMLDecodeError are ValueErrors
    where = str(first).removeprefix(f"{origin}:").strip()
    m = _WHERE.match(where)
    return (PolicyIssue(m["loc"], m["msg"]) if m else PolicyIssue("", where),)


def _issue(err: Any) -> PolicyIssue:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return PolicyIssue(key_path(loc), "unknown key", _did_you_mean(loc))
    if kind == "missing":
        return PolicyIssue(key_path(loc), "required key is missing")
    msg = str(err["msg"]).removeprefix("Value error, ")
    return PolicyIssue(key_path(loc), msg)


def key_path(loc: tuple[Any, ...]) -> str:
    """`('checks', 0, 'cmd')` as `checks[0].cmd`; the top level as `(top level)`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _did_you_mean(loc: tuple[Any, ...]) -> str | None:
    """The field of the model at `loc`'s parent closest to the unknown key, if any is close."""
    model = _model_at(loc[:-1])
    if model is None or not isinstance(loc[-1], str):
        return None
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    return close[0] if close else None


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Policy
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # an index into a list whose item model was found with its field
        field = model.model_fields.get(part)
        model = _inner_model(field.annotation) if field is not None else None
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside `X`, `list[X]`, `X | None`, `Annotated[X, …]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return None
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


__all__ = ["PolicyIssue", "PolicyReport", "check_policy_text", "key_path"]
