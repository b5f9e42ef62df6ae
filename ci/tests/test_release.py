"""The release artifacts in dist/ (ci/release.py, run by ci/setup.sh) are what a user can install
anywhere they claim: manylinux-tagged compiled wheels, optree-core carrying its abseil,
fused-optim leaving torch to torch, requiring any torch from its stable ABI's target on, and
carrying the CUDA kernels."""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("release", ROOT / "ci" / "release.py")
release = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release)

# The abseil libraries the extension needs at least (its hash maps); which helpers come along
# (throw_delegate, raw_logging...) follows the code, so only these are named.
ABSEIL_AT_LEAST = ("libabsl_hash", "libabsl_raw_hash_set")


def _wheel(package: str) -> Path:
    try:
        return release.wheel_of(package)
    except SystemExit:
        pytest.skip("no release wheel: run ci/setup.sh first")


def _site_packages(venv: str) -> Path:
    sites = sorted((ROOT / venv).glob("lib/python*/site-packages"))
    if not sites:
        pytest.skip(f"no {venv}: run ci/setup.sh first")
    return sites[0]


def _pinned_torch() -> str:
    text = (ROOT / "ci" / "constraints.txt").read_text()
    return re.search(r"^torch==(\S+)$", text, re.M).group(1)


@pytest.mark.parametrize("package", release.COMPILED)
def test_compiled_wheel_is_manylinux(package):
    wheel = _wheel(package)
    # fused-optim's _C is a limited-API module: one abi3 wheel for every CPython from 3.10 on.
    tag = r"-cp310-abi3-" if package == "fused-optim" else r"-cp3\d+-cp3\d+-"
    assert re.search(tag + r"manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
    report = release.auditwheel_show(wheel)
    assert release.audit_problems(package, report) == []
    if package == "optree-core":  # self-contained: auditwheel show itself says manylinux
        assert report["overall_tag"].startswith("manylinux_2_"), report
        assert report["external_libs"] == {}, report
    else:  # only torch's own libraries stay outside (show cannot be told they are excluded)
        # _C needs libtorch_cpu only (the stable ABI's C shim); the fast path (_eager) also
        # libtorch_python, whose unboxed eager calls (csrc/eager_call.cpp) take Python tensors.
        assert set(report["external_libs"]) <= {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so",
                                                "libgomp.so.1"}
        assert {"libtorch_cpu.so"} <= set(report["external_libs"]), report


def test_optree_core_wheel_carries_its_abseil():
    with zipfile.ZipFile(_wheel("optree-core")) as wheel:
        vendored = [n for n in wheel.namelist() if n.startswith("optree_core.libs/")]
    for lib in ABSEIL_AT_LEAST:
        assert any(Path(n).name.startswith(lib + "-") for n in vendored), (lib, vendored)


def test_fused_optim_wheel_carries_no_torch_library_and_its_cuda_kernels():
    with zipfile.ZipFile(_wheel("fused-optim")) as wheel:
        names = wheel.namelist()
    assert not [n for n in names if re.search(r"lib(torch|c10|gomp|cudart)", n)], names
    assert "fused_optim/_C.abi3.so" in names and [n for n in names if "_eager.cpython-311" in n], names
    # The kernels' library (with the CUDA kernels where nvcc was there: CI has it) rides along.
    kernels = [n for n in names if "libfused_optim_kernels" in n]
    assert len(kernels) == 1, names


def _fatbin_entries(library: Path, workdir: Path) -> list[tuple[str, int]]:
    """(kind, sm) of each image in a library's .nv_fatbin section: "SASS" machine code or "PTX".

    The section is a run of fat binaries, each a 16-byte header (magic 0xBA55ED50, version,
    header size, payload size) followed by images, each with its own header: kind (1 PTX, 2
    machine code), header size and padded payload size in its first 16 bytes, the SM number at
    byte 28. (nvcc's layout, not a documented one: CI's nvcc is pinned.)"""
    section = workdir / "nv_fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", library, section], check=True)
    data = section.read_bytes()
    entries, pos = [], 0
    while pos + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != 0xBA55ED50:  # alignment padding between fat binaries
            pos += 8
            continue
        image, end = pos + header, pos + header + size
        while image < end:
            kind, _, image_header, padded = struct.unpack_from("<HHIQ", data, image)
            (sm,) = struct.unpack_from("<I", data, image + 28)
            entries.append(({1: "PTX", 2: "SASS"}.get(kind, str(kind)), sm))
            image += image_header + padded
        pos = end
    return entries


def test_fused_optim_wheel_carries_code_for_each_listed_gpu(tmp_path):
    # What the READMEs promise: machine code for each architecture of release.CUDA_ARCHS and PTX
    # for those without "-real" (the newest, which later GPUs JIT-compile), and nothing else.
    if shutil.which("nvcc") is None or shutil.which("objcopy") is None:
        pytest.skip("no nvcc (the wheel has no CUDA kernels) or no objcopy here")
    with zipfile.ZipFile(_wheel("fused-optim")) as wheel:
        [name] = [n for n in wheel.namelist() if "libfused_optim_kernels" in n]
        library = Path(wheel.extract(name, tmp_path))
    archs = release.CUDA_ARCHS.split(";")
    expected = {("SASS", int(a.removesuffix("-real"))) for a in archs}
    expected |= {("PTX", int(a)) for a in archs if not a.endswith("-real")}
    entries = _fatbin_entries(library, tmp_path)
    assert sorted(set(entries)) == sorted(expected), entries
    assert len(entries) == len(expected), entries  # one image of each


def test_installed_optree_core_resolves_abseil_from_its_wheel_only():
    # .venv-optree-core holds the release wheel alone (no torch). This machine has Debian's
    # abseil installed, so a wheel that still linked it would resolve it from /lib here.
    site = _site_packages(".venv-optree-core")
    assert release.extension_libraries_problems("optree-core", site) == []
    [extension] = (site / "optree_core").glob("_C.*.so")
    libs = release.ldd(extension)
    abseil = {name: where for name, where in libs.items() if name.startswith("libabsl")}
    assert set(ABSEIL_AT_LEAST) <= {re.sub(r"-[0-9a-f]{8}\..*", "", n) for n in abseil}
    for name, where in abseil.items():
        assert Path(where).parent.resolve() == (site / "optree_core.libs").resolve(), (name, where)
    assert set(libs) - set(abseil) <= release.SYSTEM_RUNTIME, libs


def test_installed_fused_optim_resolves_torch_from_the_torch_beside_it():
    site = _site_packages(".venv-fused-optim")
    assert release.extension_libraries_problems("fused-optim", site) == []
    torch_lib = (site / "torch" / "lib").resolve()
    for module, needed in (("_C.*.so", ("libc10.so", "libtorch_cpu.so")),
                           ("_eager.*.so", ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so"))):
        [extension] = (site / "fused_optim").glob(module)
        libs = release.ldd(extension)
        for name in needed:
            assert Path(libs[name]).resolve().parent == torch_lib, (module, name, libs[name])
        assert not [n for n in libs if n.startswith(("libabsl", "libcudart"))], libs


def test_fused_optim_wheel_has_cuda_kernels_where_ci_has_nvcc():
    # BUILD_INFO["cuda"]: the kernels library carries the CUDA kernels (built by nvcc against CI's CPU
    # torch); on this GPU-less machine they are only loaded, never run.
    python = ROOT / ".venv-fused-optim" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-fused-optim: run ci/setup.sh first")
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc here: the wheel was built without CUDA kernels")
    code = "import fused_optim; print(fused_optim.BUILD_INFO['cuda'], fused_optim.BUILD_INFO['torch_abi'])"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT / "ci").stdout
    assert out.split() == ["True", "stable,", "torch", ">=", "2.10"], out


def test_fused_optim_shares_torchs_openmp_runtime():
    # libgomp.so.1 is excluded from the repair because torch's wheel ships it: after import, the
    # process must hold that one OpenMP runtime, not a second one from the system.
    python = ROOT / ".venv-fused-optim" / "bin" / "python"
    if not python.exists():
        pytest.skip("no .venv-fused-optim: run ci/setup.sh first")
    code = ("import fused_optim\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l})))")
    mapped = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT / "ci").stdout.split()
    torch_lib = (_site_packages(".venv-fused-optim") / "torch" / "lib").resolve()
    assert [Path(m).resolve().parent for m in mapped] == [torch_lib], mapped


def test_fused_optim_requires_the_stable_abis_target_and_records_the_torch_built_against():
    with zipfile.ZipFile(_wheel("fused-optim")) as wheel:
        meta = wheel.read(next(n for n in wheel.namelist() if n.endswith("dist-info/METADATA")))
        built = wheel.read("fused_optim/_built_against.py").decode()
    requires = re.findall(r"^Requires-Dist: (.+)$", meta.decode(), re.M)
    assert requires == ["torch>=2.10"]
    # The fast path (fused_optim._eager) serves the torch it was compiled against: CI's pin, which
    # a build in isolation also compiles against (pyproject's build requirement).
    pinned = _pinned_torch()
    assert f'TORCH_VERSION = "{pinned}' in built
    pyproject = (ROOT / "packages" / "fused-optim" / "pyproject.toml").read_text()
    assert f'"torch=={".".join(pinned.split(".")[:2])}.*"' in pyproject


def test_other_torch_is_on_this_machine_and_not_ci_s():
    assert _pinned_torch() != release.OTHER_TORCH
    assert release.FUSED_OPTIM_TESTS.is_dir()


def test_other_torch_run_leaves_out_only_tests_that_exist():
    # A renamed file or test would silently run again under the other torch: each entry must name
    # a file of the suite, and a test defined in it.
    for part in release.OTHER_TORCH_LEAVES_OUT:
        file, _, test = part.partition("::")
        source = (release.FUSED_OPTIM_TESTS / file).read_text()
        assert not test or re.search(rf"^def {test}\(", source, re.M), part
    args = release.other_torch_deselection()
    ignored = {Path(a.removeprefix("--ignore=")).name for a in args if a.startswith("--ignore=")}
    assert ignored == {p for p in release.OTHER_TORCH_LEAVES_OUT if "::" not in p}
    assert args[-2:] == ["-k", "not test_every_cuda_source_compiles and not test_every_cpu_isa_build_agrees_bitwise"]


def test_ldd_parsing():
    libs = release.ldd(Path("/bin/sh").resolve())
    assert "libc.so.6" in libs and Path(libs["libc.so.6"]).exists()
    assert set(libs) <= release.SYSTEM_RUNTIME


# --- optree-core for every CPython (issue 25, item 3) ------------------------------------------
def test_extra_cpythons_are_the_supported_ones_but_ci_s():
    # cp311 is dist/wheels' wheel (CI's own Python); the others together cover requires-python.
    pyproject = (ROOT / "packages" / "optree-core" / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in pyproject
    assert set(release.EXTRA_PYTHONS) | {"3.11"} == {"3.10", "3.11", "3.12", "3.13"}


def test_minor_of_reads_the_wheel_tag():
    wheel = Path("optree_core-0.1.0-cp312-cp312-manylinux_2_34_x86_64.whl")
    assert release.minor_of(wheel) == "3.12"
    assert release.cpython_tag("3.13") == "cp313"
    with pytest.raises(SystemExit):
        release.minor_of(Path("optree_core-0.1.0-py3-none-any.whl"))


def test_find_python_rejects_what_is_not_a_version():
    with pytest.raises(SystemExit, match="not a CPython version"):
        release.find_python("3.12.1")


@pytest.mark.parametrize("minor", release.EXTRA_PYTHONS)
def test_find_python_finds_each_extra_cpython(minor):
    try:
        python = release.find_python(minor)
    except SystemExit:
        pytest.skip(f"no CPython {minor} on this machine")
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == minor


def test_pythons_option_builds_optree_core_only():
    with pytest.raises(SystemExit):  # argparse's error, before anything is built
        release.main(["build", "fused-optim", "--pythons", "3.12"])
    with pytest.raises(SystemExit, match="optree-core only"):
        release.build_for_python("fused-optim", "3.12")


def test_smoke_subset_names_existing_test_files():
    command = release.suite_command(Path("python"), "smoke")
    targets = [Path(str(a)) for a in command if str(a).endswith(".py")]
    assert targets and all(t.is_file() for t in targets), targets
    assert release.OPTREE_TESTS in release.suite_command(Path("python"), "full")


def test_extra_cpython_wheels_are_manylinux_and_stay_out_of_dist_wheels():
    extra = release.cpython_wheels()
    if not extra:
        pytest.skip("no extra-CPython wheels: run ci/release.py build optree-core --pythons all")
    for wheel in extra:
        assert release.minor_of(wheel) in release.EXTRA_PYTHONS, wheel.name
        assert re.search(r"-cp3\d+-cp3\d+-manylinux_2_\d+_x86_64\.whl$", wheel.name), wheel.name
        report = release.auditwheel_show(wheel)
        assert release.audit_problems("optree-core", report) == [], report
        assert report["external_libs"] == {}, report
    # ci/setup.sh and wheel_of() see one optree-core wheel, the cp311 one, in dist/wheels.
    assert "-cp311-" in _wheel("optree-core").name


def test_verify_s_scratch_directory_is_deleted_after_verify_returns(tmp_path):
    scratch = tmp_path / "release-smoke-x"
    (scratch / "venv" / "lib").mkdir(parents=True)
    for i in range(200):
        (scratch / "venv" / "lib" / f"m{i}.py").write_text("x = 1\n")
    release.remove_in_background(scratch)
    deadline = time.monotonic() + 30
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not scratch.exists()
    assert tmp_path.exists()  # only what it was given
