"""What `pip install treeqa` gets: the wheel and the sdist, built from a copy of the repository's
files, hold every module, the shipped configs, the web page, py.typed and the licence, and no
tests or benchmarks."""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from treeqa import __version__

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "src", "configs")
# The module of each optional dependency that treeqa imports (its tests skip where it is absent).
EXTRAS = {"spacy": "spacy", "matplotlib": "matplotlib.pyplot", "lightning": "lightning.pytorch"}
BUILD = "from setuptools import build_meta as b; b.build_wheel('dist'); b.build_sdist('dist')"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """(the wheel's file names, the sdist's file names without its top folder)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in SOURCES:  # a copy, so the build's own folders stay out of the repository
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        elif source.exists():
            shutil.copy(source, tree / name)
    done = subprocess.run([sys.executable, "-c", BUILD], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tree / "dist").glob("*.whl")
    (sdist,) = (tree / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    return zipfile.ZipFile(wheel).namelist(), in_sdist


def test_the_wheel_holds_every_module_config_and_static_file(
    built: tuple[list[str], list[str]],
) -> None:
    wheel, _ = built
    package = REPO / "src"
    expected = [p.relative_to(package).as_posix() for p in package.rglob("*.py")]
    expected += [f"treeqa/configs/{p.name}" for p in (REPO / "configs").glob("*.toml")]
    expected += [p.relative_to(package).as_posix() for p in package.glob("treeqa/serve/static/*")]
    expected += ["treeqa/py.typed"]
    assert len(expected) > 100
    assert sorted(set(expected) - set(wheel)) == []
    assert f"treeqa-{__version__}.dist-info/licenses/LICENSE" in wheel  # and --version's version
    assert [n for n in wheel if n.startswith(("tests/", "benchmarks/", "configs/"))] == []


def test_the_sdist_builds_the_same_wheel_and_leaves_the_tests_out(
    built: tuple[list[str], list[str]],
) -> None:
    _, sdist = built
    for config in (REPO / "configs").glob("*.toml"):
        assert f"configs/{config.name}" in sdist
    assert "LICENSE" in sdist and "src/treeqa/serve/static/index.html" in sdist
    assert [n for n in sdist if n.startswith(("tests/", "benchmarks/"))] == []


@pytest.mark.parametrize("distribution", sorted(EXTRAS))
def test_an_installed_optional_dependency_imports(distribution: str) -> None:
    """An extra installed but failing to import would only skip its tests (lightning 2.2 under
    setuptools 82, which has no pkg_resources; spaCy 3.7.5 without click): here it fails."""
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    importlib.import_module(EXTRAS[distribution])
