"""Build metadata, and proof that every CUDA source compiles (nvcc, compile-only: CI has no GPU)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import fused_optim

PACKAGE = Path(__file__).resolve().parents[1]
CUDA_SOURCES = sorted((PACKAGE / "csrc" / "cuda").glob("*.cu"))


def test_build_info():
    info = fused_optim.BUILD_INFO
    assert set(info) >= {"compiler", "cxx_standard", "cxx11_abi", "cuda", "torch_version", "torch_abi", "eager"}
    # The fast path (fused_optim._eager) loads only into the torch release it was compiled against.
    assert info["eager"] is False or fused_optim._torch_abi.eager_matches(info["torch_version"], torch.__version__)
    assert info["cxx11_abi"] == torch.compiled_with_cxx11_abi()
    assert info["cxx_standard"] >= 202002
    assert isinstance(info["cuda"], bool) and isinstance(info["compiler"], str) and info["compiler"]


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="needs Linux and readelf")
def test_extension_shares_torchs_cxx_runtime():
    # A private (static) libstdc++ inside the extension crashes when an error message is formatted;
    # the build links the shared one torch runs on (see CMakeLists.txt).
    dynamic = subprocess.run(["readelf", "-d", fused_optim._C.__file__], capture_output=True, text=True,
                             check=True).stdout
    assert "libstdc++.so" in dynamic, dynamic


def test_version_is_declared_once():
    from fused_optim.version import __version__

    assert fused_optim.__version__ == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    assert __version__ not in pyproject  # read by the regex provider, never repeated


def test_cpu_kernels_use_several_threads_when_allowed():
    # A large call goes through torch's parallel_for (its stable ABI's); torch's thread setting is honoured.
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            p = [torch.zeros(1 << 18)]
            torch.ops.fused_optim.sgd_step_(p, [torch.ones(1 << 18)], [], lr=1.0, momentum=0.0, dampening=0.0,
                                           weight_decay=0.0, nesterov=False, maximize=False, first_step=False)
            assert torch.equal(p[0], torch.full((1 << 18,), -1.0))
    finally:
        torch.set_num_threads(old)


def _nvcc() -> str | None:
    return shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc") or None


@pytest.mark.skipif(not CUDA_SOURCES, reason="CUDA sources not shipped with this install")
@pytest.mark.skipif(_nvcc() is None, reason="nvcc not found")
def test_every_cuda_source_compiles(tmp_path):
    # The .cu files depend on the math headers and the CUDA runtime only, so this needs no CUDA torch.
    nvcc = _nvcc()

    def compile_one(src: Path) -> tuple[Path, subprocess.CompletedProcess]:
        cmd = [nvcc, "-std=c++20", "-c", str(src), "-o", str(tmp_path / (src.stem + ".o")),
               "-I", str(PACKAGE / "csrc"), "-I", str(PACKAGE / "include"),
               "-arch=compute_80", "-code=compute_80",  # PTX only: skips ptxas, checks the same code
               # Unoptimized device code: the warnings come from the front ends, which -O0 runs alike;
               # cicc's optimizer took 22 of the 35 s (one of CI's two cores, in every suite run).
               "-Xcicc", "-O0",
               "-Xcompiler", "-Wall", "-Werror", "all-warnings"]
        return src, subprocess.run(cmd, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(compile_one, CUDA_SOURCES))
    failures = [f"{src.name}:\n{r.stdout}{r.stderr}" for src, r in results if r.returncode != 0]
    assert not failures, "\n".join(failures)
    assert [s.name for s in CUDA_SOURCES] == ["kernels.cu"]  # one file launches every kernel (csrc/kernels.h)


# Kernels of the vector path (launch_plan.h's RunBlock, as kernels.cu launches it) for 16- and
# 32-bit elements: enough to see how a group's 16 bytes reach memory.
_VECTOR_PATH_KERNELS = """
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "cuda/launch_plan.h"
namespace cuda = fused_optim::cuda;
namespace bind = fused_optim::bind;
template <typename K, typename S>
using Op = cuda::BoundOp<K, S, float, __half, __nv_bfloat16>;
template <typename Meta, typename O>
__global__ void Kernel(const __grid_constant__ Meta meta, const O op) {
  cuda::RunBlock(meta, op, blockIdx.x, threadIdx.x, blockDim.x);
}
template __global__ void Kernel(const __grid_constant__ cuda::LaunchMeta<bind::AdamStep>, const Op<bind::AdamStep, __nv_bfloat16>);
template __global__ void Kernel(const __grid_constant__ cuda::LaunchMeta<bind::AdamStep>, const Op<bind::AdamStep, float>);
template __global__ void Kernel(const __grid_constant__ cuda::LaunchMeta<bind::SgdStep>, const Op<bind::SgdStep, __half>);
"""


@pytest.mark.skipif(not CUDA_SOURCES, reason="CUDA sources not shipped with this install")
@pytest.mark.skipif(_nvcc() is None, reason="nvcc not found")
def test_the_vector_path_stores_each_group_in_one_128_bit_access(tmp_path):
    # A group's column is written back as one 16-byte store (st.global...v4), never element by
    # element: nvcc once split the copy of a pack into 8 two-byte stores per bf16 column (4 per
    # fp32 one), at constant offsets from one address, and the 16-bit steps ran at half the copy
    # bandwidth on an H200. The splitting happens in nvcc's optimizer, so this compiles optimized
    # PTX for sm_90 (the GPUs measured) with the wheel's flags and reads the stores.
    source = tmp_path / "vector_path.cu"
    source.write_text(_VECTOR_PATH_KERNELS)
    ptx = tmp_path / "vector_path.ptx"
    subprocess.run([_nvcc(), "-std=c++20", "-O3", "--fmad=false", "-arch=compute_90", "-ptx", str(source), "-o",
                    str(ptx), "-I", str(PACKAGE / "csrc"), "-I", str(PACKAGE / "include")],
                   check=True, capture_output=True, timeout=300)
    kernels = re.split(r"\.entry ", ptx.read_text())[1:]
    assert len(kernels) == 3
    for kernel in kernels:
        stores = re.findall(r"^\s*st\.global(\.[\w.]+)\s+\[([^\]]+)\]", kernel, re.MULTILINE)
        vector = [kind for kind, _ in stores if ".v4." in kind]
        # Adam: param, exp_avg, exp_avg_sq, max_exp_avg_sq, torch.amp's unscaled grads (SGD: 3 of them).
        assert len(vector) >= 4, (kernel.split("(")[0], stores)
        # A pack stored piece by piece: scalar stores at a constant offset from a base address.
        pieces = [(kind, at) for kind, at in stores if ".v" not in kind and re.search(r"\+\d+$", at)]
        assert not pieces, (kernel.split("(")[0], pieces)


def test_import_does_not_need_other_stack_packages():
    code = "import sys; import fused_optim; assert 'optree_core' not in sys.modules and 'diffopt' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


_ISA_CHECK = """
import sys, torch, fused_optim
from fused_optim.ops import FUNCTIONAL_OPS
from helpers import FUNCTIONAL_CASES, op
out = {}
for case in FUNCTIONAL_CASES:
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        lists = case.make(dtype, shapes=[(2500,), (3, 7)])
        out[(case.id, str(dtype))] = new = op(case.op)(*lists, **case.kwargs)
        # The backward kernels too, given cotangents of every output.
        gen = torch.Generator().manual_seed(1)
        cotangents = [[torch.randn(t.shape, generator=gen, dtype=dtype) for t in lst] for lst in new]
        saved = [lists[i] for i in FUNCTIONAL_OPS[case.op].saved]
        out[(case.id, str(dtype), "backward")] = op(case.op + "_backward")(*cotangents, *saved, **case.kwargs)
# Every 16-bit pattern through the conversions (NaNs, infinities, subnormals, values rounding to
# infinity): p - 0.75 g widens both, computes in float32 and narrows (F16C/AVX-512 or plain code).
for dtype in (torch.float16, torch.bfloat16):
    p = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    g = p.flip(0)
    out[("conversions", str(dtype))] = [[t.view(torch.int16) for t in lst]
                                        for lst in op("sgd_update")([p], [g], [], lr=0.75, momentum=0.0, dampening=0.0,
                                                                    weight_decay=0.0, nesterov=False, maximize=False,
                                                                    first_step=False)]
torch.save(out, sys.argv[1])
"""


def test_every_cpu_isa_build_agrees_bitwise(tmp_path):
    # The CPU loops are built for the baseline ISA, AVX2 and AVX-512F (the widest the CPU has runs);
    # without FMA contraction all must give bit-identical results. On a CPU without one of the
    # ISAs the cap simply selects a narrower build again.
    results = []
    for isa in ("baseline", "avx2", "avx512"):
        path_entries = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path_entries)), FUSED_OPTIM_CPU_ISA=isa)
        path = tmp_path / f"{isa}.pt"
        subprocess.run([sys.executable, "-c", _ISA_CHECK, str(path)], check=True, env=env)
        results.append(torch.load(path))
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        for key in results[0]:
            for a, b in zip(results[0][key], other[key]):
                for x, y in zip(a, b):
                    assert torch.equal(x, y), key
