"""requirements.lock agrees with pyproject.toml, and this environment is the lock (`make lock` refreshes it)."""
from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _lock() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for n, line in enumerate((REPO / "requirements.lock").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and name and version and " " not in line, f"requirements.lock:{n}: not 'name==version': {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"requirements.lock:{n}: {name} pinned twice"
        pins[key] = Version(version)
    return pins


def _requirements() -> list[Requirement]:
    """Every requirement pyproject.toml states: build system, dependencies and all extras."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = doc["project"]
    extras = project.get("optional-dependencies", {})
    reqs = [Requirement(r) for r in doc["build-system"]["requires"] + project["dependencies"]]
    for group in extras.values():
        reqs += [Requirement(r) for r in group]
    return [r for r in reqs if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ["", *extras])]


def test_lock_pins_every_requirement_within_its_range():
    pins = _lock()
    assert len(pins) > 100
    missing = [str(r) for r in _requirements() if canonicalize_name(r.name) not in pins]
    outside = [f"{r} (locked {pins[canonicalize_name(r.name)]})" for r in _requirements()
               if canonicalize_name(r.name) in pins and not r.specifier.contains(pins[canonicalize_name(r.name)],
                                                                                 prereleases=True)]
    assert not missing, f"in pyproject.toml, not in requirements.lock (run `make lock`): {missing}"
    assert not outside, f"requirements.lock outside pyproject.toml's range (run `make lock`): {outside}"


def test_lock_leaves_out_what_breaks_the_cpu_torch():
    # PyPI's torchvision/torchaudio/torchcodec are built for another torch and break transformers here.
    assert not {"torchvision", "torchaudio", "torchcodec", "tritonforge"} & set(_lock())


def test_this_environment_is_the_lock():
    stale = []
    for name, version in _lock().items():
        try:
            have = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != version:
            stale.append(f"{name}: locked {version}, installed {have}")
    assert not stale, f"this environment is not the lock (run `make install`): {stale[:10]}"
