"""Developer sessions for the monorepo.

The test, lint and demo sessions run inside the one virtualenv made by ``ci/setup.sh``
(``.venv``): rebuilding torch and the C++ packages per session would waste minutes. Run them as
``.venv/bin/nox -s tests`` (or through ``bash ci/test.sh``, which does the set-up first).
The benchmark session gets its own virtualenv, because the peers it compares against (optree,
jax, dm-tree, torchopt, higher) must never leak into the test environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "ci"))
from release import PYTEST_WORKERS  # noqa: E402  (how CI's pytest runs use the cores)

PACKAGES = ["optree-core", "fused-optim", "diffopt"]
PEERS = ["optree", "jax[cpu]", "dm-tree", "torchopt", "higher", "pytest-benchmark[histogram]>=5.1,<6"]
# The benchmark suite's areas (benchmarks/<area>/test_*.py), in the order `nox -s benchmarks` runs them.
BENCH_AREAS = ["pytree", "optim", "maml", "implicit", "distributed", "func"]
BENCH_RESULTS = ROOT / "benchmarks" / "results"
CONSTRAINTS = str(ROOT / "ci" / "constraints.txt")
# The released peer each drop-in claim is measured against, with what its own tests import.
COMPAT_PEERS = {
    "optree": ["optree==0.20.0", "pytest", "attrs", "numpy", "jax[cpu]"],
    "torchopt": ["torchopt==0.7.3", "pytest", "jax[cpu]", "jaxopt", "optax"],
}
# What TorchOpt's examples import beyond the peer (ci/compat/examples.py); torchvision's MNIST and
# the Omniglot loader are replaced by generated stand-ins, and torchrl is left out (its releases
# for this torch do not match the example), so that example is reported as not runnable.
COMPAT_EXAMPLES = ["matplotlib", "pandas", "seaborn", "tensorboard", "torchviz", "graphviz",
                   "gym>=0.20,<0.24", "setproctitle"]

nox.options.sessions = ["tests", "tests_tooling"]
nox.options.reuse_existing_virtualenvs = True


def _present(package: str) -> bool:
    return (ROOT / "packages" / package / "pyproject.toml").exists()


# Where each suite runs: optree-core and fused-optim in virtualenvs holding only their own wheel
# (and torch for fused-optim), which proves they need nothing else; optree-core once more and
# diffopt against the whole stack in .venv.
SUITES = {
    "optree-core": [".venv-optree-core", ".venv"],
    "fused-optim": [".venv-fused-optim"],
    "diffopt": [".venv"],
}


def _python(venv: str) -> str:
    if venv == ".venv":
        return os.environ.get("DIFFOPT_VENV", str(ROOT / ".venv")) + "/bin/python"
    return str(ROOT / venv / "bin" / "python")


# fused-optim's kernel tests once more with every CPU call run through the CUDA launch plan and
# kernel body emulated on the host (FUSED_OPTIM_EMULATE_CUDA=1; csrc/cuda/launch_plan.h): CI has no
# GPU, and this is how a wrong index, a missing scalar or a limit of the CUDA path fails in CI.
# (tests/test_cuda_plan.py, in the first pass, switches the mode itself.)
EMULATED_CUDA_TESTS = ["test_ops.py", "test_functional.py", "test_optim.py", "test_adafactor.py",
                       "test_research_optim.py", "test_amp.py", "test_host_sync.py", "test_muon.py",
                       "test_capturable.py"]


def _pytest(session: nox.Session, package: str) -> None:
    tests = ROOT / "packages" / package / "tests"
    for venv in SUITES[package]:
        session.log(f"{package} tests in {venv}")
        session.run(_python(venv), "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider",
                    *PYTEST_WORKERS, *session.posargs, external=True)
        if package == "fused-optim":
            session.log(f"{package} kernel tests through the emulated CUDA launches in {venv}")
            session.run(_python(venv), "-m", "pytest", *(str(tests / name) for name in EMULATED_CUDA_TESTS), "-q",
                        "-p", "no:cacheprovider", *PYTEST_WORKERS, *session.posargs, external=True,
                        env={"FUSED_OPTIM_EMULATE_CUDA": "1"})


@nox.session(venv_backend="none")
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """Run one package's test suite against its installed wheel (see SUITES)."""
    if not _present(package):
        session.skip(f"{package} does not exist yet")
    _pytest(session, package)


@nox.session(name="tests_tooling", venv_backend="none")
def tests_tooling(session: nox.Session) -> None:
    """Tests of the repository's own tooling (ci/)."""
    session.run(sys.executable, "-m", "pytest", str(ROOT / "ci" / "tests"), "-q", *PYTEST_WORKERS, *session.posargs)


@nox.session(name="isa_matrix", venv_backend="none")
def isa_matrix(session: nox.Session) -> None:
    """The doctests and numerical tests again under each CPU build of fused-optim's loops
    (FUSED_OPTIM_CPU_ISA) and of torch's kernels (ATEN_CPU_CAPABILITY) this CPU can run; the
    combinations and what each runs are in ci/isa_matrix.py (``-- --list`` prints them)."""
    session.run(_python(".venv"), str(ROOT / "ci" / "isa_matrix.py"), *session.posargs, external=True)


@nox.session(name="tests_all", venv_backend="none")
def tests_all(session: nox.Session) -> None:
    """Run every package's tests in one pytest process per package."""
    for package in PACKAGES:
        if _present(package):
            _pytest(session, package)
    tests_tooling(session)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff over every package, the benchmarks and the CI scripts."""
    session.run(sys.executable, "-m", "ruff", "check", "packages", "benchmarks", "ci", "noxfile.py", "conftest.py")


# The packages whose C++ `format` checks. optree-core's joins once the branches editing it now
# have landed (formatting it today would collide with them).
FORMAT_PACKAGES = ["fused-optim"]
CXX_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}


@nox.session(name="format", reuse_venv=True)
def format_cxx(session: nox.Session) -> None:
    """clang-format (style: .clang-format) over FORMAT_PACKAGES' C++: a check, or
    ``nox -s format -- --fix`` to rewrite the files."""
    session.install("clang-format==23.1.3")  # pinned: releases format differently
    files = sorted(str(path) for package in FORMAT_PACKAGES for folder in ("csrc", "include")
                   for path in (ROOT / "packages" / package / folder).rglob("*") if path.suffix in CXX_SUFFIXES)
    mode = ["-i"] if "--fix" in session.posargs else ["--dry-run", "--Werror"]
    session.run("clang-format", *mode, *files)


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """The main job: the meta-learning demo once diffopt exists, the pytree benchmark before."""
    maml = ROOT / "packages" / "diffopt" / "examples" / "maml_sinusoid.py"
    if maml.exists():
        session.run(sys.executable, str(maml), *session.posargs)
    else:
        session.run(sys.executable, str(ROOT / "benchmarks" / "pytree" / "bench_pytree.py"),
                    "--quick", *session.posargs)


@nox.session(venv_backend="none")
def sanitize(session: nox.Session) -> None:
    """Build optree-core with AddressSanitizer + UBSan and fuzz its bindings (opt-in, slow)."""
    session.run("bash", str(ROOT / "packages" / "optree-core" / "tests" / "sanitize" / "run.sh"),
                *session.posargs, external=True)


@nox.session(venv_backend="none")
def release(session: nox.Session) -> None:
    """Release artifacts, proven: nox -s release [-- PACKAGE...]

    Builds each package's sdist (dist/sdist) and wheel (dist/wheels; fused-optim against the
    installed torch), repairs the compiled wheels with auditwheel, then runs release_check.
    """
    release_py = str(ROOT / "ci" / "release.py")
    # optree-core also for CPython 3.10, 3.12 and 3.13 (dist/wheels-cpython); verify runs its
    # whole suite under each of them.
    pythons = ["--pythons", "all"] if not session.posargs or "optree-core" in session.posargs else []
    session.run(sys.executable, release_py, "build", *session.posargs, *pythons)
    session.run(sys.executable, release_py, "verify", *session.posargs)
    session.run(sys.executable, "-m", "pytest", str(ROOT / "ci" / "tests" / "test_release.py"), "-q")


@nox.session(name="release_check", venv_backend="none")
def release_check(session: nox.Session) -> None:
    """Prove the artifacts in dist/ (CI, after ci/setup.sh built them the release way): twine
    check, auditwheel show, and each wheel installed alone into a fresh virtualenv and imported.
    Takes no arguments: ci/test.sh passes its own (pytest's) to every session.
    optree-core's wheels for CPython 3.10, 3.12 and 3.13 (dist/wheels-cpython) each run its whole
    suite in a fresh virtualenv of their Python (about a minute for the three)."""
    session.run(sys.executable, str(ROOT / "ci" / "release.py"), "verify")


@nox.session(venv_backend="none")
def bump(session: nox.Session) -> None:
    """Bump one package's version: nox -s bump -- optree-core minor"""
    session.run(sys.executable, str(ROOT / "ci" / "bump_version.py"), *session.posargs)


def _see_main_venv(session: nox.Session) -> None:
    """Our stack comes from the main venv through a .pth file; only peers are installed here.

    The file adds that site-packages with ``site.addsitedir``, not as a plain path line, so that
    its own ``.pth`` files run too: an editable install (``pip install -e``) or the source-path
    file of a development venv is only such a file, and a plain path line would leave ``diffopt``
    and ``fused_optim`` unimportable here.
    """
    venv_site = Path(os.environ.get("DIFFOPT_VENV", ROOT / ".venv"))
    site = next(venv_site.glob("lib/python*/site-packages"))
    own_site = Path(session.run(
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        silent=True).strip())
    (own_site / "_diffopt_stack.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")


@nox.session(reuse_venv=True)
def compat(session: nox.Session) -> None:
    """A peer's own tests through the import alias: nox -s compat -- optree|torchopt CHECKOUT

    CHECKOUT is a clone of metaopt/optree or metaopt/torchopt. The peer is installed in this
    session's own virtualenv (never in .venv) so its native pass count is measured in the same
    run; see ci/compat/run.py. For TorchOpt the session then runs its examples natively and
    through the alias and compares what they print (ci/compat/examples.py).
    """
    if len(session.posargs) < 2:
        session.error("usage: nox -s compat -- optree|torchopt PATH_TO_PEER_CHECKOUT [pytest args]")
    _see_main_venv(session)
    peer = session.posargs[0]
    session.install("-c", CONSTRAINTS, *COMPAT_PEERS[peer])
    session.run("python", str(ROOT / "ci" / "compat" / "run.py"), *session.posargs)
    if peer == "torchopt":
        session.install("-c", CONSTRAINTS, *COMPAT_EXAMPLES)
        session.run("python", str(ROOT / "ci" / "compat" / "examples.py"), session.posargs[1])


# The packages mypy ([tool.mypy] in pyproject.toml, which lists the older modules' exemptions)
# checks: all three.
TYPECHECKED = ["optree-core", "fused-optim", "diffopt"]


@nox.session(reuse_venv=True)
def typecheck(session: nox.Session) -> None:
    """mypy over TYPECHECKED packages (or those named after ``--``), against .venv's torch."""
    _see_main_venv(session)
    session.install("mypy==2.4.1")
    packages = session.posargs or TYPECHECKED
    session.run("mypy", *(str(ROOT / "packages" / p / "src" / p.replace("-", "_")) for p in packages))


@nox.session(reuse_venv=True)
def benchmarks(session: nox.Session) -> None:
    """The peers-side-by-side suite (pytest-benchmark), in a venv of its own that sees .venv's
    packages: nox -s benchmarks [-- [--check] [AREA...] [pytest options]]

    Each area writes its record beside RESULTS.md: benchmarks/results/<area>.json
    (--benchmark-json), <area>.md (the ratio tables and verdict) and histograms/<area>-*.svg.
    ``--check`` instead compares the run with that record: pytest-benchmark's --benchmark-compare
    fails on a median 25% slower, and --compare-ratios prints every peer/ours ratio against the
    recorded one (ratios hardly move with the machine's load; times do). The record is left
    alone: the new run goes to .benchmarks/latest/.
    """
    _see_main_venv(session)
    session.install("-c", CONSTRAINTS, *PEERS)
    check = "--check" in session.posargs
    areas = [a for a in session.posargs if a in BENCH_AREAS] or BENCH_AREAS
    options = [a for a in session.posargs if a not in BENCH_AREAS and a != "--check"]
    BENCH_RESULTS.mkdir(exist_ok=True)
    for area in areas:
        record = BENCH_RESULTS / f"{area}.json"
        if check:
            if not record.exists():
                session.error(f"no recorded run to compare with: {record}")
            out = ROOT / ".benchmarks" / "latest"
            outputs = [f"--benchmark-compare={record}", "--benchmark-compare-fail=median:25%",
                       f"--compare-ratios={record}",
                       f"--benchmark-json={out / f'{area}.json'}",
                       f"--bench-report={out / f'{area}.md'}"]
            out.mkdir(parents=True, exist_ok=True)
        else:
            outputs = [f"--benchmark-json={record}", f"--bench-report={BENCH_RESULTS / f'{area}.md'}",
                       f"--benchmark-histogram={BENCH_RESULTS / 'histograms' / area}"]
        session.run("python", "-m", "pytest", str(ROOT / "benchmarks" / area), "-p",
                    "no:cacheprovider", "-q", "--benchmark-columns=min,median,iqr,rounds,iterations",
                    *outputs, *options)


@nox.session(name="benchmarks_smoke", venv_backend="none")
def benchmarks_smoke(session: nox.Session) -> None:
    """Every benchmark still runs (CI): tiny workloads, one round, no peers, no timing kept."""
    # Nothing is timed, so the files run side by side (54 -> 35 s on CI's 2 cores), each file on
    # one worker, where the race fixture builds each workload once; the closing ratio tables are
    # the workers' then, and ci/tests/test_bench_suite.py checks them.
    session.run(sys.executable, "-m", "pytest", str(ROOT / "benchmarks"), "--quick",
                "--benchmark-disable", "-q", "-p", "no:cacheprovider", *PYTEST_WORKERS, "--dist", "loadfile",
                *session.posargs)
