"""The lowest versions the project declares are the ones CI installs.

.ci/run's lower-bound leg installs .ci/lower-bounds.txt exactly: every floor
of pyproject.toml's dependencies (and of the test runner) has its line there,
at the same version, and nothing else is pinned there.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The test extra's packages that the lower-bound leg installs: the runner.
TEST_RUNNER = ("pytest", "hypothesis")


def _version(text):
    """A release as a tuple of ints, trailing zeros dropped: 1.24 == 1.24.0."""
    parts = [int(part) for part in text.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _floors():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runner = [
        requirement
        for requirement in project["optional-dependencies"]["test"]
        if re.split(r"[<>=!\[ ]", requirement)[0] in TEST_RUNNER
    ]
    floors = {}
    for requirement in [*project["dependencies"], *runner]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement)
        assert match, f"{requirement!r} in pyproject.toml has no plain floor"
        floors[match[1].lower()] = _version(match[2])
    return floors


def _pins():
    pins = {}
    for line in (ROOT / ".ci" / "lower-bounds.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = _version(version)
    return pins


def test_ci_installs_exactly_the_declared_floors():
    floors = _floors()
    assert {"numpy", "scikit-learn", *TEST_RUNNER} <= set(floors)
    assert _pins() == floors
