"""pyproject.toml ships what a checkout has: every package, and the top-level data directories.

The packages are listed by hand (packages.find cannot discover the mapped data directories), so
a new subpackage missing from the list would be absent from a regular install only; this test
catches it without installing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from constrain import datadirs

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_checkout_is_listed():
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "constrain").rglob("__init__.py")
    }
    listed = set(SETUPTOOLS["packages"]) - set(SETUPTOOLS["package-dir"])
    assert not found - listed, f"add to packages in pyproject.toml: {sorted(found - listed)}"
    assert not listed - found, f"remove from packages in pyproject.toml: {sorted(listed - found)}"


@pytest.mark.parametrize("package", sorted(SETUPTOOLS["package-dir"]))
def test_each_data_directory_is_shipped_with_its_files(package):
    directory = ROOT / SETUPTOOLS["package-dir"][package]
    assert package in SETUPTOOLS["packages"]
    assert package.startswith("constrain.data.")  # where datadirs.path looks when installed
    assert [f for pattern in SETUPTOOLS["package-data"][package] for f in directory.glob(pattern)]
    assert datadirs.path(package.rsplit(".", 1)[1]) == directory  # the checkout's, in place
