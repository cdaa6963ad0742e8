"""The wheel holds every package of the source tree: pyproject lists packages by hand (the folders map
onto `transformer_viewer.*`), so a new subpackage missing there would install without its code."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top in ("model", "viewer", "assets"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(("transformer_viewer",) + init.parent.relative_to(ROOT).parts))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "pyproject lists packages that do not exist"


def test_every_asset_file_is_in_package_data():
    """Data files under assets/ (the bundled model, the bundled SAE's folder) reach the wheel only
    through [tool.setuptools.package-data]'s patterns."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "transformer_viewer.assets"]
    assets = ROOT / "assets"
    files = [p.relative_to(assets).as_posix() for p in assets.rglob("*")
             if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    missed = [f for f in files if not any(fnmatch.fnmatchcase(f, pattern) and f.count("/") == pattern.count("/")
                                          for pattern in patterns)]
    assert missed == [], "add patterns for these to [tool.setuptools.package-data] in pyproject.toml"
