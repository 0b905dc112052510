"""Every starter `oms.toml` that `oms policy init` writes parses and validates."""

from __future__ import annotations

import pytest

from policy import Policy, parse_policy
from policy.templates import Project, starter_text

PROJECTS = {
    "python-venv": Project("python", "requirements.lock"),
    "python-requirements-txt": Project("python", "requirements-dev.txt"),
    "python-uv": Project("python", "uv.lock", uv=True),
    "python-no-lock-yet": Project("python"),
    "node-npm-test": Project("node", "package-lock.json", npm_test=True),
    "node-test": Project("node", "package-lock.json"),
    "go": Project("go"),
}


@pytest.mark.parametrize("name", PROJECTS)
def test_each_starter_parses_and_validates(name: str) -> None:
    project = PROJECTS[name]
    policy = parse_policy(starter_text(project).encode(), "oms.toml").policy
    assert [c.name for c in policy.checks] == ["tests"]
    check = policy.checks[0]
    if project.template == "go":
        assert check.cmd == ["go", "test", "./..."] and not policy.toolchains
        return
    (toolchain,) = policy.toolchains
    assert check.toolchain == toolchain.name
    assert toolchain.lock == (project.lock or toolchain.lock)


def test_the_toolchain_kind_and_check_follow_the_project() -> None:
    def parsed(p: Project) -> Policy:
        return parse_policy(starter_text(p).encode(), "oms.toml").policy

    assert parsed(PROJECTS["python-venv"]).toolchains[0].kind == "python-venv"
    assert parsed(PROJECTS["python-uv"]).toolchains[0].kind == "uv"
    assert parsed(PROJECTS["python-venv"]).checks[0].cmd[:3] == ["python", "-m", "pytest"]
    assert parsed(PROJECTS["node-npm-test"]).checks[0].cmd == ["npm", "test"]
    assert parsed(PROJECTS["node-test"]).checks[0].cmd == ["node", "--test"]
    assert parsed(PROJECTS["node-test"]).toolchains[0].kind == "node-npm"


def test_each_starter_check_declares_its_test_report() -> None:
    reports = {name: parse_policy(starter_text(p).encode(), "oms.toml").policy.checks[0].report
               for name, p in PROJECTS.items()}  # fmt: skip
    assert reports == {"python-venv": "pytest", "python-requirements-txt": "pytest",
                       "python-uv": "pytest", "python-no-lock-yet": "pytest",
                       "node-npm-test": None, "node-test": "node-test",
                       "go": "go-test"}  # fmt: skip


def test_every_section_is_explained() -> None:
    text = starter_text(PROJECTS["python-venv"])
    for section in ("[[toolchains]]", "[[checks]]", "[sandbox]", "[scanners]", "[protected]",
                    "[transfer]"):  # fmt: skip
        assert f"# {section}:" in text, section
    assert "no module proxy" in starter_text(PROJECTS["go"])
