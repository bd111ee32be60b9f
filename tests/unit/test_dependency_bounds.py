"""The dependency bounds stay what CI runs: pyproject.toml's lower bounds are the versions
`make test-lowest` tests (constraints-lowest.txt), and every pin of constraints.txt (what
`make setup`, hence CI, installs) lies inside pyproject.toml's range."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (REPO / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            package, _, version = line.partition("==")
            assert version, f"{name}: {line!r} is not NAME==VERSION"
            out[canonicalize_name(package)] = version
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    return [Requirement(r) for r in project["dependencies"] + extras]


def runtime() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    for req in runtime():
        assert any(s.operator in ("<", "<=") for s in req.specifier), f"{req} has no upper bound"


def test_the_lowest_pins_are_the_lower_bounds() -> None:
    lowest = pins("constraints-lowest.txt")
    bounds = {}
    for req in runtime():
        lower = [s.version for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{req} has no single lower bound"
        bounds[canonicalize_name(req.name)] = lower[0]
    assert set(lowest) == set(bounds)
    for name, version in bounds.items():
        assert Version(lowest[name]) == Version(version), f"{name}: lowest pin {lowest[name]}, lower bound {version}"


def test_what_ci_installs_is_inside_the_bounds() -> None:
    seen = pins("constraints.txt")
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in seen, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(seen[name], prereleases=True), f"constraints.txt has {name}=={seen[name]}: outside {req}"
