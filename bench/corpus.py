"""Fake secrets and realistic filler code for the scanner benchmark and tests.

Every value is generated at run time from a seeded RNG, in the format the
providers use (prefixes, lengths and alphabets as Gitleaks 8.30.1's default
rules and detect-secrets 1.5's plugins expect them). No literal in this file is
a matchable secret: prefixes and PEM markers are assembled from pieces, so this
source passes both scanners clean.
"""

from __future__ import annotations

import base64
import json
import random
import string
from dataclasses import dataclass

from gatekeeper.scan import ScanItem

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = UPPER + LOWER + DIGITS
HEX = "0123456789abcdef"
WORD = ALNUM + "_"
TOKEN = ALNUM + "_-"
B64 = ALNUM + "+/"
PASSWORD = ALNUM + "-._~"

# Pieces only: none of these is a secret or a pattern match on its own.
_DASHES = "-" * 5
_PK = "PRIV" + "ATE KEY"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, alphabet: str, n: int) -> str:
    """Random, with at least one upper, one lower and one digit (entropy, no stopword runs)."""
    while True:
        s = _pick(rng, alphabet, n)
        if (
            any(c in UPPER for c in s)
            and any(c in LOWER for c in s)
            and any(c in DIGITS for c in s)
        ):
            return s


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


# --- one generator per provider format -------------------------------------------------


def aws_access_key_id(rng: random.Random, prefix: str = "AKIA") -> str:
    return prefix + _pick(rng, UPPER + "234567", 16)


def aws_secret_access_key(rng: random.Random) -> str:
    return _mixed(rng, ALNUM + "/+", 40)


def github_pat(rng: random.Random) -> str:
    return "ghp" + "_" + _mixed(rng, ALNUM, 36)


def github_fine_grained_pat(rng: random.Random) -> str:
    return "github" + "_pat_" + _mixed(rng, ALNUM, 22) + "_" + _mixed(rng, ALNUM, 59)


def gitlab_pat(rng: random.Random) -> str:
    return "glpat" + "-" + _mixed(rng, ALNUM, 20)


def slack_bot_token(rng: random.Random) -> str:
    return (
        "xox"
        + "b-"
        + _pick(rng, DIGITS, 11)
        + "-"
        + _pick(rng, DIGITS, 12)
        + "-"
        + _mixed(rng, ALNUM, 24)
    )


def slack_user_token(rng: random.Random) -> str:
    ids = "-".join(_pick(rng, DIGITS, 12) for _ in range(3))
    return "xox" + "p-" + ids + "-" + _pick(rng, HEX, 32)


def slack_webhook_url(rng: random.Random) -> str:
    path = "T" + _pick(rng, UPPER + DIGITS, 8) + "/B" + _pick(rng, UPPER + DIGITS, 8) + "/"
    return "https://hooks." + "slack.com/services/" + path + _mixed(rng, ALNUM, 24)


def stripe_key(rng: random.Random, kind: str = "sk") -> str:
    return kind + "_li" + "ve_" + _mixed(rng, ALNUM, 24)


def google_api_key(rng: random.Random) -> str:
    return "AI" + "za" + _mixed(rng, TOKEN, 35)


def private_key(rng: random.Random, kind: str = "RSA") -> str:
    """A PEM block (multi-line). kind: RSA, EC, OPENSSH or "" (PKCS#8)."""
    label = f"{kind} {_PK}" if kind else _PK
    if kind == "OPENSSH":
        body = _b64(b"openssh-key-v1\x00" + rng.randbytes(380))
        width = 70
    else:
        body = _b64(rng.randbytes({"RSA": 1190, "EC": 121}.get(kind, 1216)))
        width = 64
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return "\n".join([f"{_DASHES}BEGIN {label}{_DASHES}", *lines, f"{_DASHES}END {label}{_DASHES}"])


def jwt(rng: random.Random) -> str:
    head = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {
        "sub": str(rng.randrange(10**9)),
        "name": "svc-deploy",
        "iat": 1700000000 + rng.randrange(10**6),
    }
    body = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{_b64url(rng.randbytes(32))}"


def npm_token(rng: random.Random) -> str:
    return "np" + "m_" + _mixed(rng, ALNUM, 36)


def pypi_token(rng: random.Random) -> str:
    return "pypi-" + "AgEIcHlwaS5vcmc" + _mixed(rng, TOKEN, 150)


def twilio_api_key(rng: random.Random) -> str:
    return "S" + "K" + _pick(rng, HEX, 32)


def sendgrid_key(rng: random.Random) -> str:
    return "S" + "G." + _mixed(rng, TOKEN, 22) + "." + _mixed(rng, TOKEN, 43)


def mailgun_key(rng: random.Random) -> str:
    return "ke" + "y-" + _pick(rng, HEX, 32)


def openai_key(rng: random.Random, project: bool = True) -> str:
    marker = "T3Blbk" + "FJ"
    if project:
        return "sk-" + "proj-" + _mixed(rng, ALNUM, 74) + marker + _mixed(rng, ALNUM, 74)
    return "sk-" + _mixed(rng, ALNUM, 20) + marker + _mixed(rng, ALNUM, 20)


def anthropic_key(rng: random.Random) -> str:
    return "sk-" + "ant-api03-" + _mixed(rng, TOKEN, 93) + "AA"


def azure_storage_key(rng: random.Random) -> str:
    return _b64(rng.randbytes(64))


def digitalocean_pat(rng: random.Random) -> str:
    return "do" + "p_v1_" + _pick(rng, HEX, 64)


def shopify_token(rng: random.Random) -> str:
    return "shp" + "at_" + _pick(rng, HEX, 32)


def heroku_uuid(rng: random.Random) -> str:
    h = _pick(rng, HEX, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def heroku_v2(rng: random.Random) -> str:
    return "HR" + "KU-AA" + _mixed(rng, TOKEN, 58)


def square_access_token(rng: random.Random) -> str:
    return "sq0" + "atp-" + _mixed(rng, TOKEN, 22)


def square_oauth_secret(rng: random.Random) -> str:
    return "sq0" + "csp-" + _mixed(rng, TOKEN, 43)


def password(rng: random.Random, n: int = 20) -> str:
    return _mixed(rng, PASSWORD, n)


# --- the corpus --------------------------------------------------------------------------


def make_corpus(seed: int = 0) -> list[tuple[str, str, str]]:
    """(kind, file path, text) for every fake secret; PEM blocks are several lines of text."""
    r = random.Random(seed)
    out: list[tuple[str, str, str]] = []

    def add(kind: str, path: str, text: str) -> None:
        out.append((kind, path, text))

    def pw(n: int = 20, alphabet: str = PASSWORD) -> str:
        return _mixed(r, alphabet, n)

    add("aws-access-key-id", "deploy/settings.py", f'AWS_ACCESS_KEY_ID = "{aws_access_key_id(r)}"')
    add("aws-access-key-id-env", "infra/.env", f"AWS_ACCESS_KEY_ID={aws_access_key_id(r, 'ASIA')}")
    add(
        "aws-secret-access-key",
        "deploy/settings.py",
        f'aws_secret_access_key = "{aws_secret_access_key(r)}"',
    )
    add("github-pat-classic", "scripts/release.sh", f'export GITHUB_TOKEN="{github_pat(r)}"')
    add(
        "github-pat-fine-grained",
        ".github/workflows/sync.yml",
        f"          token: {github_fine_grained_pat(r)}",
    )
    add("gitlab-pat", ".gitlab-ci.yml", f'  GITLAB_TOKEN: "{gitlab_pat(r)}"')
    add("slack-bot-token", "bot/config.json", f'  "slack_bot_token": "{slack_bot_token(r)}",')
    add("slack-user-token", "bot/app.js", f"const slackUserToken = '{slack_user_token(r)}';")
    add("slack-webhook-url", "alerts/notify.py", f'WEBHOOK_URL = "{slack_webhook_url(r)}"')
    add("stripe-secret-key", "payments/config.rb", f"Stripe.api_key = '{stripe_key(r, 'sk')}'")
    add("stripe-restricted-key", "payments/.env", f"STRIPE_RESTRICTED_KEY={stripe_key(r, 'rk')}")
    add("google-api-key", "web/src/firebase.ts", f'  apiKey: "{google_api_key(r)}",')
    add("private-key-rsa", "certs/server.key", private_key(r, "RSA"))
    add("private-key-ec", "certs/signing.pem", private_key(r, "EC"))
    add("private-key-openssh", "deploy/id_ed25519", private_key(r, "OPENSSH"))
    add("private-key-pkcs8", "app/tls.py", private_key(r, ""))
    add("jwt", "tests/fixtures/auth.http", f"Authorization: Bearer {jwt(r)}")
    add("npm-token-npmrc", ".npmrc", f"//registry.npmjs.org/:_authToken={npm_token(r)}")
    add("npm-token-code", "tools/publish.js", f"const NPM_TOKEN = '{npm_token(r)}';")
    add("pypi-token", ".pypirc", f"password = {pypi_token(r)}")
    add("twilio-api-key", "sms/twilio.py", f'TWILIO_API_KEY = "{twilio_api_key(r)}"')
    add("sendgrid-api-key", "mail/sendgrid.env", f"SENDGRID_API_KEY={sendgrid_key(r)}")
    add("mailgun-api-key", "mail/settings.py", f'MAILGUN_API_KEY = "{mailgun_key(r)}"')
    add("openai-project-key", "ai/client.py", f'client = OpenAI(api_key="{openai_key(r)}")')
    add("openai-legacy-key", "ai/legacy.py", f'openai.api_key = "{openai_key(r, project=False)}"')
    add("anthropic-api-key", "ai/.env", f'ANTHROPIC_API_KEY="{anthropic_key(r)}"')
    account = "acct" + _pick(r, LOWER + DIGITS, 8)
    connection = ";".join([
        "DefaultEndpointsProtocol=https", f"AccountName={account}",
        f"AccountKey={azure_storage_key(r)}", "EndpointSuffix=core.windows.net",
    ])  # fmt: skip
    add(
        "azure-storage-connection-string",
        "appsettings.json",
        f'  "StorageConnection": "{connection}",',
    )
    add("azure-storage-key", "infra/main.tf", f'  storage_account_key = "{azure_storage_key(r)}"')
    add("digitalocean-pat", "infra/do.tf", f'  token = "{digitalocean_pat(r)}"')
    add("shopify-access-token", "shop/config.yml", f"  access_token: {shopify_token(r)}")
    add("heroku-api-key", "ops/deploy.sh", f'HEROKU_API_KEY="{heroku_uuid(r)}"')
    add("heroku-api-key-v2", "ops/heroku.env", f"HEROKU_API_KEY={heroku_v2(r)}")
    add("square-access-token", "pos/square.py", f'SQUARE_ACCESS_TOKEN = "{square_access_token(r)}"')
    add("square-oauth-secret", "pos/square.py", f'SQUARE_APP_SECRET = "{square_oauth_secret(r)}"')
    add("password-ini", "config/app.ini", f"password = {pw(alphabet=ALNUM)}")
    add("password-python", "app/db.py", f'DB_PASSWORD = "{pw()}"')
    add("secret-yaml", "k8s/values.yaml", f'  client_secret: "{pw(32, ALNUM)}"')
    add("secret-json-tilde", "config/prod.json", f'  "api_secret": "{pw(32)}",')
    add("secret-dotenv-tilde", ".env.production", f"SECRET_KEY={pw(40)}")
    add("dockerfile-env-token", "Dockerfile", f"ENV GITHUB_TOKEN={github_pat(r)}")
    add(
        "basic-auth-url-https",
        "scripts/fetch.sh",
        f"curl -fsSL https://deploy:{pw(16)}@artifacts.internal.example/pkg.tgz -o pkg.tgz",
    )
    add(
        "basic-auth-url-db",
        "app/settings.py",
        f'DATABASE_URL = "postgres://app:{pw(16)}@db.internal:5432/app"',
    )
    add("high-entropy-hex", "app/crypto.py", f'SIGNING_KEY = "{_pick(r, HEX, 64)}"')
    add(
        "high-entropy-base64",
        "web/src/session.js",
        f'const sessionSecret = "{_b64(r.randbytes(33))}";',
    )
    add("high-entropy-base64-json", "data/seed.json", f'    "blob": "{_b64(r.randbytes(30))}",')
    add(
        "npm-lock-resolved-url-token",
        "package-lock.json",
        f'      "resolved": "https://ci:{pw(20)}@registry.internal.example/left-pad/-/left-pad-1.3.0.tgz",',
    )
    return out


# --- lockfiles: hash fields that are not secrets ------------------------------------------


def sri(rng: random.Random, bits: int = 512) -> str:
    """A Subresource Integrity value as npm, yarn and pnpm write it: `sha512-<base64>`."""
    return f"sha{bits}-" + _b64(rng.randbytes(bits // 8))


def package_lock(rng: random.Random, packages: int = 16, resolved_token: str | None = None) -> str:
    """A package-lock.json (lockfileVersion 3) of `packages` dependencies, each with its
    `resolved` URL and `integrity`; `resolved_token`: put into the first URL as a password."""
    names = [f"{_ident(rng).replace('_', '-')}-{n}" for n in range(packages)]
    entries: dict[str, object] = {"": {"name": "app", "version": "1.0.0",
                                       "dependencies": {n: "^1.0.0" for n in names}}}  # fmt: skip
    for k, name in enumerate(names):
        auth = f"ci:{resolved_token}@" if resolved_token and k == 0 else ""
        entries[f"node_modules/{name}"] = {
            "version": "1.2.3",
            "resolved": f"https://{auth}registry.npmjs.org/{name}/-/{name}-1.2.3.tgz",
            "integrity": sri(rng, rng.choice((512, 512, 384, 256))),
            "license": "MIT",
        }
    lock = {"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": True,
            "packages": entries}  # fmt: skip
    return json.dumps(lock, indent=2) + "\n"


def hash_field_lines(rng: random.Random) -> dict[str, str]:
    """{path: text}: the hash fields of other lockfiles and of test fixtures, none a secret."""

    def hexd(n: int) -> str:
        return _pick(rng, HEX, n)

    return {
        "yarn.lock": f'"left-pad@^1.3.0":\n  version "1.3.0"\n  integrity {sri(rng)}\n',
        "yarn-berry.lock": f'"left-pad@npm:^1.3.0":\n  checksum: 10c0/{hexd(128)}\n',
        "pnpm-lock.yaml": f"  /left-pad@1.3.0:\n    resolution: {{integrity: {sri(rng)}}}\n",
        "poetry.lock": f'files = [\n    {{file = "a.whl", hash = "sha256:{hexd(64)}"}},\n]\n',
        "uv.lock": f'wheels = [{{ url = "https://x.example/a.whl", hash = "sha256:{hexd(64)}" }}]'
        "\n",
        "Cargo.lock": f'[[package]]\nname = "libc"\nchecksum = "{hexd(64)}"\n',
        "go.sum": f"golang.org/x/net v0.1.0 h1:{_b64(rng.randbytes(32))}\n",
        "requirements.txt": f"click==8.1.7 \\\n    --hash=sha256:{hexd(64)}\n",
        "tests/fixtures/blobs.json": (
            f'{{"sha": "{hexd(40)}", "digest": "{hexd(64)}", "md5": "{hexd(32)}",\n'
            f' "sha512": "{hexd(128)}", "file_sha256": "sha256:{hexd(64)}"}}\n'
        ),
    }


# --- realistic filler code ------------------------------------------------------------------

_WORDS = (
    "user order item cart price total count index value result config client server request "
    "response handler session cache queue worker task event message payload record entry "
    "account profile address status state retry timeout limit offset page size name title"
).split()
_EXTS = (".py", ".js", ".ts", ".json", ".yaml", ".md", ".go")


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(_WORDS, rng.randint(1, 3)))


def _camel(rng: random.Random) -> str:
    parts = rng.sample(_WORDS, rng.randint(1, 3))
    return parts[0] + "".join(p.title() for p in parts[1:])


def _py(rng: random.Random) -> list[str]:
    f, a, b = _ident(rng), _ident(rng), _ident(rng)
    return [
        f"def {f}({a}, {b}=None):",
        f'    """Return the {a.replace("_", " ")} for the given {b.replace("_", " ")}."""',
        f"    if {b} is None:",
        f"        {b} = {{}}",
        f"    # TODO: handle {rng.choice(_WORDS)} errors ({rng.randint(100, 999)})",
        f'    logger.debug("{f}: %s items", len({a}))',
        f'    {b}["{rng.choice(_WORDS)}"] = {a}.get("{rng.choice(_WORDS)}", {rng.randint(0, 500)})',
        f"    return {b}",
        "",
    ]


def _js(rng: random.Random) -> list[str]:
    f, a = _camel(rng), _camel(rng)
    return [
        f"export async function {f}({a}) {{",
        f"  const res = await fetch(`/api/v1/{rng.choice(_WORDS)}/${{{a}.id}}`, {{",
        '    method: "POST",',
        '    headers: { "Content-Type": "application/json" },',
        f"    body: JSON.stringify({{ {rng.choice(_WORDS)}: {a}, retries: {rng.randint(1, 5)} }}),",
        "  });",
        f"  // {rng.choice(_WORDS)} may be empty on the first call",
        "  return res.json();",
        "}",
        "",
    ]


def _json(rng: random.Random) -> list[str]:
    return [
        "{",
        f'  "name": "{_ident(rng)}",',
        f'  "version": "{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}",',
        f'  "description": "The {rng.choice(_WORDS)} {rng.choice(_WORDS)} service",',
        f'  "timeout_ms": {rng.randint(100, 60000)},',
        f'  "enabled": {rng.choice(["true", "false"])},',
        f'  "tags": ["{rng.choice(_WORDS)}", "{rng.choice(_WORDS)}"]',
        "}",
        "",
    ]


def _yaml(rng: random.Random) -> list[str]:
    return [
        f"{_ident(rng)}:",
        f"  image: registry.example.com/{rng.choice(_WORDS)}:{rng.randint(1, 20)}.0",
        f"  replicas: {rng.randint(1, 12)}",
        "  env:",
        f"    - name: {_ident(rng).upper()}",
        f'      value: "{rng.choice(_WORDS)}"',
        "    - name: LOG_LEVEL",
        f"      value: {rng.choice(['info', 'debug', 'warning'])}",
        "",
    ]


def _md(rng: random.Random) -> list[str]:
    w = rng.choice
    return [
        f"## The {w(_WORDS)} {w(_WORDS)}",
        "",
        f"Each {w(_WORDS)} has a {w(_WORDS)} and a {w(_WORDS)}; the {w(_WORDS)} is retried "
        f"at most {rng.randint(2, 9)} times before the {w(_WORDS)} gives up.",
        "",
        f"    make {w(_WORDS)} && ./run --{w(_WORDS)}={rng.randint(1, 99)}",
        "",
    ]


def _go(rng: random.Random) -> list[str]:
    t, f = _camel(rng).title(), _camel(rng).title()
    query = f"SELECT {rng.choice(_WORDS)} FROM {rng.choice(_WORDS)}s WHERE id = $1"
    return [
        f"func (s *{t}) {f}(ctx context.Context, id string) error {{",
        f'\tif err := s.db.QueryRowContext(ctx, "{query}", id).Err(); err != nil {{',
        f'\t\treturn fmt.Errorf("{f}: %w", err)',
        "\t}",
        "\treturn nil",
        "}",
        "",
    ]


_BLOCKS = {
    ".py": _py,
    ".js": _js,
    ".ts": _js,
    ".json": _json,
    ".yaml": _yaml,
    ".md": _md,
    ".go": _go,
}


def filler_lines(rng: random.Random, n: int, ext: str = ".py") -> list[str]:
    """About n lines of realistic, secret-free code in the flavour of `ext`."""
    block = _BLOCKS.get(ext, _py)
    out: list[str] = []
    while len(out) < n:
        out += block(rng)
    return out[:n]


@dataclass(frozen=True)
class Planted:
    kind: str
    path: str
    first: int  # line number of the secret's first line
    last: int  # and of its last (PEM blocks span several)
    text: str


def make_change(seed: int, target_bytes: int) -> tuple[list[ScanItem], list[Planted]]:
    """A change of about target_bytes of realistic code with every corpus secret sprinkled in.

    Each corpus entry sits in its own file, at a random line among filler code; the rest
    of the bytes are filler files of mixed languages.
    """
    rng = random.Random(seed)
    items: list[ScanItem] = []
    planted: list[Planted] = []
    size = 0
    for kind, path, text in make_corpus(seed):
        ext = "." + path.rsplit(".", 1)[-1] if "." in path.rsplit("/", 1)[-1] else ".py"
        before = filler_lines(rng, rng.randint(5, 60), ext)
        after = filler_lines(rng, rng.randint(5, 60), ext)
        secret_lines = text.split("\n")
        lines = before + secret_lines + after
        first = len(before) + 1
        planted.append(Planted(kind, path, first, first + len(secret_lines) - 1, text))
        items.append(ScanItem(path, list(enumerate(lines, start=1))))
        size += sum(len(x) + 1 for x in lines)
    n = 0
    while size < target_bytes:
        ext = rng.choice(_EXTS)
        lines = filler_lines(rng, rng.randint(40, 400), ext)
        items.append(
            ScanItem(f"src/{_ident(rng)}/{_ident(rng)}_{n}{ext}", list(enumerate(lines, 1)))
        )
        size += sum(len(x) + 1 for x in lines)
        n += 1
    rng.shuffle(items)
    return items, planted


def item_bytes(items: list[ScanItem]) -> int:
    return sum(len(t.encode("utf-8", "surrogateescape")) + 1 for it in items for _, t in it.lines)
