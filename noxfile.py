"""Every packrt workflow in one place.

    nox -s demo          the main job: load a model and serve it (see README)
    nox -t ci            what CI runs: build, per-package tests, demo smoke, lint
    nox -s tests         each package installed alone from its wheel, then its tests
    nox -s lint          ruff and mypy over every package

Hypothesis loads its built-in "ci" profile (derandomized, no deadline) whenever CI=true,
which is how CI runs, so runs there reproduce exactly.

Sessions that install torch keep the default virtualenv/pip backend: the pinned CPU build
(``torch==2.13.0``) resolves from a local wheel with pip, while uv and open ranges would
download multi-gigabyte CUDA builds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "no"

ROOT = Path(__file__).parent
DIST = ROOT / "dist"
TORCH = "torch==2.13.0"

# Distribution name -> import name, in dependency order (a package after what it needs).
PACKAGES: dict[str, str] = {
    "packrt-kernels-cpu": "packrt_kernels_cpu",
    "packrt-kernels-cuda": "packrt_kernels_cuda",
    "packrt-hooks": "packrt_hooks",
    "packrt-core": "packrt_core",
    "packrt-io": "packrt_io",
    "packrt": "packrt",
}
# Packages whose tests compare against torch (PACKRT_REQUIRE_TORCH=1 makes its absence fail).
NEEDS_TORCH = {"packrt-kernels-cpu", "packrt-core", "packrt-io", "packrt"}


def _install_from_dist(session: nox.Session, *requirements: str) -> None:
    """Install packrt distributions from the wheels in dist/ (and third parties from the index)."""
    session.install("--find-links", str(DIST), *requirements)


@nox.session(tags=["ci"])
def build(session: nox.Session) -> None:
    """Build every package's wheel once into dist/."""
    session.install("hatchling>=1.24", "build>=1.2")
    shutil.rmtree(DIST, ignore_errors=True)
    for dist in PACKAGES:
        session.run(
            "python",
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(DIST),
            str(ROOT / "packages" / dist),
            silent=True,
        )
    session.log("wheels: " + ", ".join(sorted(p.name for p in DIST.glob("*.whl"))))


@nox.session(tags=["ci"], requires=["build"])
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package installed alone from its wheel (its declared dependencies only), then its tests."""
    extras = [TORCH] if package in NEEDS_TORCH else []
    _install_from_dist(session, f"{package}[test]", *extras)
    tests_dir = ROOT / "packages" / package / "tests"
    session.chdir(str(tests_dir.parent))
    session.run(
        "python",
        "-m",
        "pytest",
        "tests",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
        "-q",
        *session.posargs,
    )


def _demo(session: nox.Session, *args: str) -> None:
    _install_from_dist(session, "packrt")
    session.chdir(str(ROOT))
    session.run("python", "-m", "packrt.demo", *args, *session.posargs)


@nox.session(requires=["build"])
def demo(session: nox.Session) -> None:
    """The main job: the full demo."""
    _demo(session)


@nox.session(tags=["ci"], requires=["build"])
def demo_smoke(session: nox.Session) -> None:
    """The demo in its quick mode, so it cannot rot."""
    _demo(session, "--smoke")


@nox.session(tags=["ci"])
def lint(session: nox.Session) -> None:
    """ruff and mypy over every package's sources and tests."""
    session.install(
        "ruff==0.17.6",
        "mypy==2.4.1",
        "numpy>=2.0",
        "ml_dtypes>=0.5",
        "threadpoolctl>=3.5",
        "safetensors>=0.4",
        "pytest>=8",
        "hypothesis>=6.120",
    )
    sources = [str(ROOT / "packages" / d / "src") for d in PACKAGES]
    session.run("ruff", "check", "packages", "noxfile.py")
    session.run("ruff", "format", "--check", "packages", "noxfile.py")
    session.run(
        "mypy",
        "--strict",
        "--python-version",
        "3.11",
        *[arg for name in PACKAGES.values() for arg in ("-p", name)],
        env={"MYPYPATH": os.pathsep.join(sources)},
    )
