"""oms never runs git under the repository's own configuration (issue: the gates' word).

Each vector plants, in a real repository, a setting or file that makes git run a
program or see other objects. The program is a marker script: it writes a file.
Every vector is first shown to be live — plain `git` in the repository does run the
marker — and vectors that do not mask one another share a lab; then oms' whole battery
(init, scan of the files, --staged, --history and --diff, process-result with delivery and
a push to a bare remote on disk, transfer preview of the repository, sandbox run) must
leave no marker. Vectors that change what git reports (replace refs, grafts, binary
drivers, thresholds, encodings) must not change oms' answer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.markers import MarkerScripts
from support.oms import parse_single_json, run_oms
from support.pty import trust_tip
from support.repos import git, make_repo
from support.secrets import fake_aws_key

CHECK_POLICY = 'version = 1\n\n[[checks]]\nname = "true"\ncmd = ["/bin/true"]\ntimeout_s = 30\n'


@dataclass
class Lab(MarkerScripts):
    root: Path
    repo: Path
    remote: Path
    env: dict[str, str]
    markers: Path

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> str:
        proc = subprocess.run(["git", "-C", str(self.repo), *args], input=input,
                              capture_output=True, env=self.env, check=False)  # fmt: skip
        if check:
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout.decode(errors="replace").strip()

    def oms(self, *args: str, timeout: float = 120) -> tuple[int, dict[str, Any]]:
        cut = args.index("--") if "--" in args else len(args)
        argv = [*args[:cut], "--json", *args[cut:]]
        proc = run_oms(argv, env=self.env, cwd=self.root, timeout=timeout)
        return proc.returncode, parse_single_json(proc)

    def commit_file(self, path: str, text: str, message: str = "change") -> str:
        (self.repo / path).parent.mkdir(parents=True, exist_ok=True)
        (self.repo / path).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "--no-verify", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str]) -> Lab:
    files = {"oms.toml": CHECK_POLICY, "app.py": "print('hi')\n"}
    repo = make_repo(tmp_path / "repo", files, env=oms_env, readme=None, message="base")
    remote = tmp_path / "remote.git"
    markers = tmp_path / "markers"
    markers.mkdir()
    git(tmp_path, "init", "-q", "--bare", str(remote), env=oms_env)
    lab = Lab(tmp_path, repo, remote, oms_env, markers)
    git(repo, "remote", "add", "origin", str(remote), env=oms_env)
    git(repo, "push", "-q", "origin", "main", env=oms_env)
    code, out = lab.oms("init", "--repo", str(repo))
    assert code == 0, out
    return lab


def candidate_branch(lab: Lab, name: str = "cand", text: str = "print('agent')\n") -> str:
    lab.git("checkout", "-q", "-b", name)
    sha = lab.commit_file("app.py", text, "agent change")
    lab.git("checkout", "-q", "main")
    return sha


def battery(lab: Lab, candidate: str = "cand") -> dict[str, tuple[int, dict[str, Any]]]:
    """Every oms command that reads the repository, including a delivery and a push."""
    r = str(lab.repo)
    return {
        "scan": lab.oms("scan", "--repo", r, "--diff", f"main..{candidate}"),
        "scan files": lab.oms("scan", "--repo", r),
        "scan staged": lab.oms("scan", "--repo", r, "--staged"),
        "scan history": lab.oms("scan", "--repo", r, "--history", candidate),
        "gate": lab.oms(
            "process-result",
            "--repo",
            r,
            "--candidate",
            candidate,
            "--deliver-branch",
            "verified",
            "--push",
            "origin",
        ),
        "preview": lab.oms(
            "transfer",
            "preview",
            "--repo",
            r,
            "--to",
            "anthropic:claude",
            "--purpose",
            "review",
            "--context",
            "repo",
        ),
        "sandbox": lab.oms("sandbox", "run", "--repo", r, "--", "/bin/true"),
    }


# -- vectors that would make git run a program ---------------------------------------------

Plant = Callable[[Lab], None]
Live = Callable[[Lab], None]


def _filter_attrs(where: str) -> Plant:
    def plant(lab: Lab) -> None:
        s = lab.marker_script(f"filter-{where}", tail="cat")
        lab.git("config", "filter.evil.clean", str(s))
        lab.git("config", "filter.evil.smudge", str(s))
        lab.git("config", "filter.evil.required", "false")
        line = "* filter=evil\n"
        if where == "worktree":
            (lab.repo / ".gitattributes").write_text(line)
        elif where == "info":
            (lab.repo / ".git" / "info").mkdir(exist_ok=True)
            (lab.repo / ".git" / "info" / "attributes").write_text(line)
        else:
            attrs = lab.root / "global-attributes"
            attrs.write_text(line)
            lab.git("config", "core.attributesFile", str(attrs))
        (lab.repo / "app.py").touch()  # stat-dirty: git status must re-read it

    return plant


def _plant_process_filter(lab: Lab) -> None:
    lab.git("config", "filter.proc.process", str(lab.marker_script("process-filter")))
    (lab.repo / ".gitattributes").write_text("* filter=proc\n")
    (lab.repo / "app.py").touch()


def _live_status(lab: Lab) -> None:
    (lab.repo / "app.py").write_text("print('edited')\n")
    lab.git("status", "--porcelain", check=False)  # a broken process filter fails it
    lab.git("checkout", "--", "app.py", check=False)


def _plant_gpg(lab: Lab) -> None:
    s = lab.marker_script("gpg")
    lab.git("config", "gpg.program", str(s))
    lab.git("config", "log.showSignature", "true")
    # A candidate commit with a signature header, so that showing it verifies it.
    head = lab.git("rev-parse", "cand")
    raw = subprocess.run(["git", "-C", str(lab.repo), "cat-file", "commit", head],
                         capture_output=True, env=lab.env, check=True).stdout  # fmt: skip
    header, _, message = raw.partition(b"\n\n")
    sig = (b"gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n"
           b" -----END PGP SIGNATURE-----")  # fmt: skip
    signed = header + b"\n" + sig + b"\n\n" + message
    sha = lab.git("hash-object", "-t", "commit", "-w", "--stdin", input=signed)
    lab.git("update-ref", "refs/heads/cand", sha)


def _live_log(lab: Lab) -> None:
    lab.git("log", "-1", "cand", check=False)


def _plant_fsmonitor(lab: Lab) -> None:
    lab.git("config", "core.fsmonitor", str(lab.marker_script("fsmonitor")))


def _plant_hooks(lab: Lab) -> None:
    hooks = lab.root / "hooks"
    hooks.mkdir()
    for name in ("reference-transaction", "pre-push", "post-checkout", "pre-commit",
                 "post-index-change", "push-to-checkout"):  # fmt: skip
        s = lab.marker_script(f"hook-{name}")
        (hooks / name).symlink_to(s)
    lab.git("config", "core.hooksPath", str(hooks))


def _live_update_ref(lab: Lab) -> None:
    lab.git("update-ref", "refs/heads/live-probe", "main")
    lab.git("update-ref", "-d", "refs/heads/live-probe")


def _plant_textconv(lab: Lab) -> None:
    s = lab.marker_script("textconv")
    lab.git("config", "diff.evil.textconv", str(s))
    lab.git("config", "diff.evil.command", str(s))
    (lab.repo / ".git" / "info").mkdir(exist_ok=True)
    (lab.repo / ".git" / "info" / "attributes").write_text("*.py diff=evil\n")


def _live_diff(lab: Lab) -> None:
    lab.git("diff", "main", "cand", check=False)
    lab.git("log", "-p", "-1", "cand", check=False)


def _plant_receivepack(lab: Lab) -> None:
    lab.git("config", "remote.origin.receivepack", str(lab.marker_script("receivepack")))
    lab.git("config", "remote.origin.uploadpack", str(lab.marker_script("uploadpack")))


def _live_push(lab: Lab) -> None:
    lab.git("push", "-q", "origin", "cand:refs/heads/live-probe", check=False)


def _plant_ssh_command(lab: Lab) -> None:
    # The remote is on loopback port 1: plain ssh fails at once, nothing leaves the machine.
    lab.git("config", "remote.origin.url", "ssh://git@127.0.0.1:1/repo.git")
    lab.git("config", "core.sshCommand", str(lab.marker_script("sshcommand")))


def _plant_insteadof(lab: Lab) -> None:
    s = lab.marker_script("insteadof")
    lab.git("config", "protocol.ext.allow", "always")
    lab.git("config", f"url.ext::{s} %S .insteadOf", str(lab.remote))


def _plant_ext_url(lab: Lab) -> None:
    s = lab.marker_script("ext")
    lab.git("config", "protocol.ext.allow", "always")
    lab.git("config", "remote.origin.url", f"ext::{s} %S")


VECTORS: dict[str, tuple[Plant, Live]] = {
    "worktree .gitattributes filter": (_filter_attrs("worktree"), _live_status),
    ".git/info/attributes filter": (_filter_attrs("info"), _live_status),
    "core.attributesFile filter": (_filter_attrs("global"), _live_status),
    "process filter": (_plant_process_filter, _live_status),
    "gpg.program with log.showSignature": (_plant_gpg, _live_log),
    "core.fsmonitor": (_plant_fsmonitor, _live_status),
    "core.hooksPath": (_plant_hooks, _live_update_ref),
    "diff driver textconv and command": (_plant_textconv, _live_diff),
    "remote receivepack and uploadpack": (_plant_receivepack, _live_push),
    "core.sshCommand": (_plant_ssh_command, _live_push),
    "insteadOf to an ext:: URL": (_plant_insteadof, _live_push),
    "ext:: remote URL": (_plant_ext_url, _live_push),
}


# One lab and one battery per group. Each group's vectors must not disable or mask one
# another: the four `filter` vectors all set the `filter` attribute on every path (the
# info/attributes file outranks .gitattributes, which outranks core.attributesFile), so each
# is in its own group; textconv writes .git/info/attributes too, so it is not with that
# filter, nor with the process filter (git runs the broken process filter on the diffed
# blobs and stops before textconv). The four push vectors each decide how `origin` is
# reached (remote.origin.url for core.sshCommand and the ext:: URL, an insteadOf rewrite of
# the bare remote's path, the local transport's receivepack), so each is in its own group.
# The ext:: URL's push is refused before the gate runs, so it is alone: the gate would
# cover no vector beside it. plant_live proves each group's vectors live together.
GROUPS: dict[str, tuple[str, ...]] = {
    "worktree attributes, receivepack, gpg": (
        "worktree .gitattributes filter",
        "remote receivepack and uploadpack",
        "gpg.program with log.showSignature",
    ),
    "info attributes, sshCommand, fsmonitor": (
        ".git/info/attributes filter",
        "core.sshCommand",
        "core.fsmonitor",
    ),
    "attributesFile, insteadOf, textconv": (
        "core.attributesFile filter",
        "insteadOf to an ext:: URL",
        "diff driver textconv and command",
    ),
    "process filter, hooksPath": ("process filter", "core.hooksPath"),
    "ext:: remote URL": ("ext:: remote URL",),
}


def test_every_vector_is_in_exactly_one_group() -> None:
    grouped = [v for vectors in GROUPS.values() for v in vectors]
    assert sorted(grouped) == sorted(VECTORS)


def plant_live(lab: Lab, vectors: tuple[str, ...]) -> dict[str, str]:
    """Plant each vector, show it live on its own marker, and answer marker -> vector."""
    owner: dict[str, str] = {}
    for vector in vectors:
        plant, live = VECTORS[vector]
        before = set(lab.root.glob("run-*"))
        plant(lab)
        mine = {p.name.removeprefix("run-") for p in set(lab.root.glob("run-*")) - before}
        owner |= dict.fromkeys(mine, vector)
        lab.clear()
        live(lab)
        assert mine & set(lab.ran()), f"{vector}: not live; plain git did not run it"
        lab.clear()
    # Planted together, each is still live: no later vector masked an earlier one.
    for vector in vectors:
        VECTORS[vector][1](lab)
    masked = set(vectors) - {owner[m] for m in lab.ran() if m in owner}
    assert not masked, f"masked by the rest of the group: {sorted(masked)}"
    lab.clear()
    return owner


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_repository_config_vectors_run_nothing_in_oms(lab: Lab, group: str) -> None:
    vectors = GROUPS[group]
    candidate_branch(lab)
    owner = plant_live(lab, vectors)
    results = battery(lab)
    ran = {m: owner.get(m, "?") for m in lab.ran()}
    assert ran == {}, f"oms ran the repository's program (marker: vector): {ran}"
    # The gates still worked (or refused for a reason of their own), never crashed.
    for name, (code, out) in results.items():
        assert out.get("error", {}).get("kind") != "internal", (name, out)
    for name in ("scan files", "scan staged", "scan history"):
        assert results[name][0] == 0, (group, name, results[name][1])
    _, gate = results["gate"]
    if "ext:: remote URL" in vectors:  # its --push URL is refused before the gate runs
        assert gate["error"]["kind"] == "blocked" and "decision" not in gate, gate
    else:
        assert gate.get("decision") == "READY_FOR_HUMAN", (group, gate)


def test_a_remote_oms_does_not_run_a_transport_for_is_refused_before_anything_runs(
    lab: Lab,
) -> None:
    candidate_branch(lab)
    _plant_ext_url(lab)
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand",
                        "--deliver-branch", "v2", "--push", "origin")  # fmt: skip
    assert code == 3 and "refused" in out["error"]["message"], out
    assert lab.ran() == []


def test_push_through_oms_reaches_the_bare_remote_with_the_exact_commit(lab: Lab) -> None:
    sha = candidate_branch(lab)
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand",
                        "--deliver-branch", "verified", "--push", "origin")  # fmt: skip
    assert code == 0, out
    got = git(lab.remote, "rev-parse", "refs/heads/verified", env=lab.env).strip()
    assert got == sha
    assert lab.git("rev-parse", "refs/heads/verified") == sha


# -- vectors that would make git see other objects or other text ------------------------------


def test_replace_ref_does_not_make_the_gate_judge_a_stand_in(lab: Lab) -> None:
    key = fake_aws_key()
    evil = candidate_branch(lab, "evil", f'KEY = "{key}"\n')
    clean = candidate_branch(lab, "clean", "print('harmless')\n")
    lab.git("replace", evil, clean)
    # Live: git in the repository now shows the stand-in's content.
    assert "harmless" in lab.git("show", f"{evil}:app.py")
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", evil,
                        "--deliver-branch", "verified", "--push", "origin")  # fmt: skip
    assert code == 3 and out["decision"] == "BLOCKED", out
    assert any("secret found" in r for r in out["reasons"]), out["reasons"]
    assert out["commit"] == evil
    assert lab.git("rev-parse", "-q", "--verify", "refs/heads/verified", check=False) == ""


def test_grafts_do_not_change_the_parents_oms_sees(lab: Lab) -> None:
    base = lab.git("rev-parse", "main")
    lab.git("checkout", "-q", "-b", "two")
    first = lab.commit_file("a.txt", "one\n", "first")
    second = lab.commit_file("a.txt", "two\n", "second")
    lab.git("checkout", "-q", "main")
    (lab.repo / ".git" / "info").mkdir(exist_ok=True)
    (lab.repo / ".git" / "info" / "grafts").write_text(f"{second} {base}\n")
    assert lab.git("rev-parse", f"{second}~1") == base  # live: git believes the graft
    from gatekeeper.repo.git import open_repo
    from gatekeeper.repo.refs import resolve_commit

    repo = open_repo(lab.repo)
    assert resolve_commit(repo.top, "two~1") == first


def test_a_shallow_repository_is_refused_with_a_clear_message(lab: Lab, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    lab.commit_file("b.txt", "b\n", "second")
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{lab.repo}", str(shallow), env=lab.env)
    code, out = lab.oms("process-result", "--repo", str(shallow), "--candidate", "HEAD")
    assert code == 2 and "shallow" in out["error"]["message"], out


@pytest.mark.parametrize(
    "setting",
    [
        ("core.bigFileThreshold", "1"),
        ("i18n.logOutputEncoding", "UTF-16"),
        ("diff.python.binary", "true"),
    ],
    ids=lambda s: s[0],
)
def test_repository_settings_do_not_hide_a_secret_from_the_gate(
    lab: Lab, setting: tuple[str, str]
) -> None:
    key = fake_aws_key()
    lab.git("checkout", "-q", "-b", "cand")
    (lab.repo / "app.py").write_text(f"print('hi')\nKEY = '{key}'\n")
    lab.git("add", "-A")
    lab.git("commit", "-q", "-m", f"add the key {key}")
    lab.git("checkout", "-q", "main")
    (lab.repo / ".git" / "info").mkdir(exist_ok=True)
    (lab.repo / ".git" / "info" / "attributes").write_text("*.py diff=python\n")
    lab.git("config", *setting)
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand")
    assert code == 3 and out["decision"] == "BLOCKED", out
    files = {f["file"] for f in out["findings"]}
    assert "app.py" in files, out["findings"]
    assert any(f.startswith("commit:") for f in files), out["findings"]


# -- the trusted base ----------------------------------------------------------------------


def test_policy_comes_from_the_default_branch_never_from_a_named_base(lab: Lab) -> None:
    # A base branch whose policy has no checks that could fail and allows nothing else.
    lab.git("checkout", "-q", "-b", "friendly")
    lab.commit_file("oms.toml", CHECK_POLICY.replace("/bin/true", "/bin/false"), "strict")
    lab.git("checkout", "-q", "main")
    candidate_branch(lab, "cand")
    # --base friendly is not an ancestor of cand: refused.
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand",
                        "--base", "friendly")  # fmt: skip
    assert code == 2 and "ancestor" in out["error"]["message"], out
    # A candidate on top of the friendly branch, judged by main's policy (checks: /bin/true),
    # with the diff narrowed to friendly..cand2: --base must be reachable from main.
    lab.git("checkout", "-q", "friendly")
    lab.commit_file("x.txt", "x\n", "on friendly")
    lab.git("checkout", "-q", "main")
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "friendly",
                        "--base", "friendly~1")  # fmt: skip
    assert code == 2 and "default branch" in out["error"]["message"], out


def test_the_default_branch_is_the_one_oms_init_recorded(lab: Lab) -> None:
    lab.git("checkout", "-q", "-b", "trunk")
    lab.commit_file("oms.toml", CHECK_POLICY.replace("/bin/true", "/bin/false"), "trunk policy")
    lab.git("checkout", "-q", "main")
    lab.git("checkout", "-q", "-b", "cand", "trunk")
    lab.commit_file("y.txt", "y\n", "agent")
    lab.git("checkout", "-q", "main")
    code, out = lab.oms("init", "--repo", str(lab.repo), "--default-branch", "trunk")
    assert code == 0 and out["default_branch"] == "refs/heads/trunk", out
    # trunk's policy came after the mark `oms init` first recorded (main's tip): until a
    # human trusts it, the gate reads main's plan there (/bin/true).
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand")
    assert code == 3 and any("oms.toml" in r for r in out["reasons"]), out
    trust_tip(lab.repo, env=lab.env)
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", "cand")
    # trunk's plan runs /bin/false: the candidate fails under trunk's policy, not main's.
    assert code == 1 and out["decision"] == "FAILED", out
    code, out = lab.oms("init", "--repo", str(lab.repo), "--default-branch", "nope")
    assert code == 2 and "no branch" in out["error"]["message"], out


def test_delivery_never_moves_a_branch_checked_out_in_a_linked_worktree(
    lab: Lab, tmp_path: Path
) -> None:
    sha = candidate_branch(lab)
    lab.git("branch", "verified", "main")
    lab.git("worktree", "add", "-q", str(tmp_path / "wt"), "verified")
    before = lab.git("rev-parse", "verified")
    code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", sha,
                        "--deliver-branch", "verified")  # fmt: skip
    assert code == 3 and "checked out" in out["error"]["message"], out
    assert lab.git("rev-parse", "verified") == before


def test_revisions_are_data_never_options(lab: Lab) -> None:
    for bad in ("--output=/tmp/x", "-h", "main..cand", "main:oms.toml", "@{-1}", "main@{1}"):
        code, out = lab.oms("process-result", "--repo", str(lab.repo), "--candidate", bad)
        assert code == 2 and out["error"]["kind"] == "usage", (bad, out)


def test_repository_path_with_a_newline_is_refused(tmp_path: Path, oms_env: dict[str, str]) -> None:
    odd = tmp_path / "odd\nname"
    odd.mkdir()
    git(odd, "init", "-q", "-b", "main", env=oms_env)
    proc = subprocess.run([sys.executable, "-m", "gatekeeper", "init", "--repo", str(odd),
                           "--json"], env=oms_env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    out = parse_single_json(proc)
    assert proc.returncode == 2 and "newline" in out["error"]["message"], out


def test_remote_tip_is_what_the_remote_says_not_a_local_tracking_ref(lab: Lab) -> None:
    from gatekeeper.repo.git import open_repo
    from gatekeeper.repo.remote import remote_tip

    lab.git("branch", "--set-upstream-to=origin/main", "main")
    lab.git("fetch", "-q", "origin")
    pushed = lab.git("rev-parse", "main")
    repo = open_repo(lab.repo)
    assert remote_tip(repo) == ("origin/main", pushed)
    local = lab.commit_file("c.txt", "c\n", "not pushed")
    # Anyone can write a remote-tracking ref; it proves nothing.
    lab.git("update-ref", "refs/remotes/origin/main", local)
    assert remote_tip(repo) == ("origin/main", pushed)
    lab.git("config", "remote.origin.url", str(lab.root / "gone.git"))
    assert remote_tip(repo) is None


@pytest.mark.parametrize(
    ("name", "ok"),
    [("main", True), ("feature/x-1", True), ("a..b", False), ("a b", False), ("a~1", False),
     ("a.lock", False), (".hidden", False), ("a//b", False), ("a@{1}", False), ("a^", False),
     ("x\n", False), ("a:b", False), ("a/", False), ("a*", False), ("a[b", False)],
)  # fmt: skip
def test_refnames_follow_gits_rules(name: str, ok: bool) -> None:
    from gatekeeper.repo.refs import valid_refname

    assert valid_refname(f"refs/heads/{name}") is ok
    assert not valid_refname("@")


@pytest.mark.parametrize(
    ("url", "ok"),
    [("https://example.invalid/r.git", True), ("ssh://git@example.invalid/r", True),
     ("git@example.invalid:r.git", True), ("/srv/git/r.git", True), ("file:///srv/r", True),
     ("ext::sh -c touch", False), ("fd::3", False), ("http://example.invalid/r", False),
     ("git://example.invalid/r", False), ("-uhack", False), ("r.git", False)],
)  # fmt: skip
def test_only_https_ssh_and_local_remotes_are_run(url: str, ok: bool) -> None:
    from gatekeeper.repo.remote import RemoteRefused, checked_url

    if ok:
        assert checked_url(url) == url
    else:
        with pytest.raises(RemoteRefused):
            checked_url(url)
