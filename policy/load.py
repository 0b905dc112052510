"""Loading `oms.toml` from bytes or a file, with one-line errors, and its digest.

The text is untrusted (a repository's committed file), so before `tomllib` sees
it a cheap lexical pass bounds what makes `tomllib` slow or huge: size, line
length, parts per dotted key, bracket nesting and digits per number. Whatever
still goes wrong inside `tomllib` is one policy error, never a traceback.

The policy digest is SHA-256 over the RFC 8785 canonical JSON of the validated
policy (defaults filled in), so two files that mean the same thing share it.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from pydantic import ValidationError

from .errors import PolicyError
from .model import (
    DEFAULT_POLICY,
    Check,
    ConductorPolicy,
    EvidencePolicy,
    McpPolicy,
    Policy,
    ProviderPolicy,
    RunsPolicy,
    TrustPolicy,
    VerifyPolicy,
    WorkPolicy,
)

POLICY_FILE = "oms.toml"
MAX_POLICY_BYTES = 256 << 10
MAX_LINE_CHARS = 4096
MAX_KEY_PARTS = 16  # a 48 KB key of 24,000 parts needs > 1.5 GB in tomllib
MAX_NESTING = 32  # arrays and inline tables; tomllib recurses per level
MAX_DIGITS = 20  # int() of thousands of digits is slow, then a ValueError


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    origin: str  # where it came from, e.g. "oms.toml" or "<sha>:oms.toml" or "built-in defaults"
    digest: str  # "sha256:<hex>"

    @property
    def plan_digest(self) -> str:
        return plan_digest(self.policy.checks)


def _digest(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def _check_json(check: Check) -> dict[str, Any]:
    # `toolchain` is left out when unset: a plan's digest is what it was before toolchains.
    return check.model_dump(mode="json", exclude_none=True)


_CONDUCTOR_LATER = ("github_answer_timeout_s", "github_sync_timeout_s", "goal_labels", "budget")
_PROVIDER_LATER = ("egress",)
_SCANNERS_LATER = ("exclude_paths", "allow")


def policy_digest(policy: Policy) -> str:
    data = policy.model_dump(mode="json")
    data["checks"] = [_check_json(c) for c in policy.checks]
    if not policy.toolchains:
        del data["toolchains"]  # as for `toolchain`: a policy without them keeps its digest
    for name in ("roles", "providers"):  # likewise for orchestration
        if not getattr(policy, name):
            del data[name]
    for name, prov in policy.providers.items():  # provider keys added later, when unset
        for key in _PROVIDER_LATER:
            if getattr(prov, key) == ProviderPolicy.model_fields[key].default:
                del data["providers"][name][key]
    if policy.work == WorkPolicy():
        del data["work"]
    if policy.runs == RunsPolicy():
        del data["runs"]
    if policy.conductor == ConductorPolicy():
        del data["conductor"]
    else:  # keys added later stay out at their defaults: a `[conductor]` keeps its digest
        for key in _CONDUCTOR_LATER:
            if getattr(policy.conductor, key) == ConductorPolicy.model_fields[key].default:
                del data["conductor"][key]
    if policy.verify == VerifyPolicy():
        del data["verify"]  # a policy without `[verify]` keeps the digest it had
    for key in _SCANNERS_LATER:  # likewise for scanner keys added later, when unset
        if not getattr(policy.scanners, key):
            del data["scanners"][key]
    if policy.mcp == McpPolicy():
        del data["mcp"]  # likewise `[mcp]`
    if policy.trust == TrustPolicy():
        del data["trust"]  # and `[trust]`
    if policy.evidence == EvidencePolicy():
        del data["evidence"]  # and `[evidence]`
    return _digest(data)


def policy_json(policy: Policy) -> dict[str, Any]:
    """The policy as `oms policy show` prints it: every key with its default, but a check's
    `report`, `[verify]` and the later `[scanners]` keys only when set, so a policy without
    them shows as it did."""
    data = policy.model_dump(mode="json")
    for check in data["checks"]:
        if check["report"] is None:
            del check["report"]
    if policy.verify == VerifyPolicy():
        del data["verify"]
    for key in _SCANNERS_LATER:
        if not getattr(policy.scanners, key):
            del data["scanners"][key]
    if policy.mcp == McpPolicy():
        del data["mcp"]
    if policy.trust == TrustPolicy():
        del data["trust"]
    if policy.evidence == EvidencePolicy():
        del data["evidence"]
    return data


def plan_digest(checks: list[Check]) -> str:
    return _digest([_check_json(c) for c in checks])


_TOML_POS = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def _clean(text: str) -> str:
    # Error text may quote the file; keep it to one printable line.
    text = "".join(ch if ch.isprintable() else "?" for ch in text.replace("\n", " "))
    return text[:300]


def _format_validation(origin: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing":
        msg = "required key is missing"
    else:
        msg = first["msg"]
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return _clean(f"{origin}: {loc}: {msg}{tail}")


# One token of TOML text, as far as the limits care: strings and comments are skipped
# whole (a dot, bracket or digit inside them is data), so the pass never miscounts.
_STRINGS = (
    r'"""(?:[^"\\]|\\.|"{1,2}(?!"))*"{3,5}',  # multi-line basic: up to 2 quotes inside
    r"'''(?:[^']|'{1,2}(?!'))*'{3,5}",  # multi-line literal
    r'"(?:[^"\\\n]|\\.)*"',  # basic
    r"'[^'\n]*'",  # literal
)
_LEX = re.compile(
    "|".join(
        (
            f"(?P<str>{'|'.join(_STRINGS)})",
            r"(?P<comment>#[^\n]*)",
            r"(?P<open>[\[{])",
            r"(?P<close>[\]}])",
            r"(?P<sep>[=,\n])",
            r"(?P<bare>[^\s\"'#\[\]{}=,]+)",
            r"(?P<space>[ \t\r\f\v]+)",
            r"(?P<bad>.)",
        )
    ),
    re.DOTALL,
)
_WORD = re.compile(r"[0-9A-Za-z_]+")
_DEPTH_STEP = {"open": 1, "close": -1}


class _Limits:
    """The lexical pre-pass: counts per line, refuses at the first limit passed."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.line = 1
        self.depth = 0
        self.dots = 0  # dots outside strings since the last `=`, `,`, bracket or newline

    def refuse(self, what: str) -> PolicyError:
        return PolicyError(f"{self.origin}:{self.line}: {what}; refusing to parse it")

    def token(self, kind: str, tok: str) -> bool:
        """Account for one token; False to stop (tomllib will report the syntax error)."""
        if kind == "bad":
            return False
        if kind == "str":
            self.line += tok.count("\n")
        elif kind == "bare":
            self.bare(tok)
        elif kind in ("open", "close", "sep"):
            self.dots = 0  # a key ends at any of these
            self.line += int(tok == "\n")
            self.depth = max(0, self.depth + _DEPTH_STEP.get(kind, 0))
            if self.depth > MAX_NESTING:
                raise self.refuse(f"arrays and tables nested deeper than {MAX_NESTING}")
        return True

    def bare(self, tok: str) -> None:
        self.dots += tok.count(".")
        if self.dots >= MAX_KEY_PARTS:
            raise self.refuse(f"a dotted key has more than {MAX_KEY_PARTS} parts")
        for word in _WORD.findall(tok):
            digits = word.replace("_", "")
            if digits[:2].lower() in ("0x", "0o", "0b"):
                digits = digits[2:]
            if word[0].isdigit() and len(digits) > MAX_DIGITS:
                raise self.refuse(f"a number has more than {MAX_DIGITS} digits")


def check_limits(text: str, origin: str) -> None:
    """Refuse TOML text that would make tomllib slow, deep or huge (one-line PolicyError)."""
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE_CHARS:
            raise PolicyError(f"{origin}:{number}: line longer than {MAX_LINE_CHARS} characters")
    limits = _Limits(origin)
    for m in _LEX.finditer(text):
        if not limits.token(m.lastgroup or "bad", m.group()):
            return


def _decode(data: bytes, origin: str) -> str:
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{origin}: policy larger than {MAX_POLICY_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{origin}: not UTF-8 (byte {exc.start})") from None


def parse_policy(data: bytes, origin: str) -> LoadedPolicy:
    """Parse and validate policy bytes; raise PolicyError with one line on any fault."""
    text = _decode(data, origin)
    check_limits(text, origin)
    try:
        return _parse_text(text, origin)
    except (RecursionError, MemoryError, ValueError) as exc:
        # PolicyError is none of these: what lands here escaped the pre-pass.
        raise PolicyError(f"{origin}: policy too complex to parse ({type(exc).__name__})") from None


def _parse_text(text: str, origin: str) -> LoadedPolicy:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_POS.match(str(exc))
        if m is None and str(exc).endswith("(at end of document)"):
            lines = text.split("\n")
            where = f"{origin}:{len(lines)}:{len(lines[-1]) + 1}"
            msg = str(exc).removesuffix("(at end of document)").strip()
            raise PolicyError(_clean(f"{where}: TOML syntax error: {msg}")) from None
        if m:
            where = f"{origin}:{m['line']}:{m['col']}"
            raise PolicyError(_clean(f"{where}: TOML syntax error: {m['msg']}")) from None
        raise PolicyError(_clean(f"{origin}: TOML syntax error: {exc}")) from None
    try:
        policy = Policy.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(_format_validation(origin, exc)) from None
    return LoadedPolicy(policy=policy, origin=origin, digest=policy_digest(policy))


def default_policy() -> LoadedPolicy:
    return LoadedPolicy(
        policy=DEFAULT_POLICY, origin="built-in defaults", digest=policy_digest(DEFAULT_POLICY)
    )


def load_policy_file(path: Path) -> LoadedPolicy:
    """Load a policy file; an absent file means the built-in strict defaults."""
    try:
        if path.is_symlink():
            raise PolicyError(f"{path}: policy file must not be a symlink")
        data = path.read_bytes()
    except FileNotFoundError:
        return default_policy()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy: {exc.strerror}") from None
    return parse_policy(data, str(path))
