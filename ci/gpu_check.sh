#!/usr/bin/env bash
# The stack on a machine with an NVIDIA GPU: builds fused-optim's CUDA kernels, runs its whole test
# suite (the CUDA tests included), then optree-core's and diffopt's (diffopt's CUDA tests run MAML
# and implicit differentiation on the GPU), then the step/differentiable benchmark on the GPU.
# CI has no GPU, so this is run by hand where one is lent. It downloads nothing: it expects a CUDA
# torch, nvcc, scikit-build-core, nanobind, cmake, pytest and (for the benchmark, the
# pytest-benchmark suite's benchmarks/optim) pytest-benchmark in $PYTHON's environment, and abseil
# where CMake finds it (CMAKE_PREFIX_PATH) for optree-core; without abseil only fused-optim is checked.
#
#   bash ci/gpu_check.sh [OUT_DIR]                   # logs land in OUT_DIR (default out/gpu)
#   FUSED_OPTIM_CUDA_ARCHS=90 bash ci/gpu_check.sh   # build for this GPU only (faster)
#   GPU_CHECK_BENCH=0 bash ci/gpu_check.sh           # tests only
#   GPU_CHECK_SUITES=diffopt bash ci/gpu_check.sh    # build all, test only the suites named
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/gpu}
python=${PYTHON:-python3}
mkdir -p "$out"
status=0

nvidia-smi -L || exit 1
"$python" -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'; \
print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())" || exit 1

target=$(mktemp -d)
export PYTHONPATH=$target${PYTHONPATH:+:$PYTHONPATH}
build() {  # build <package> <log name>: install one package into $target
  local start=$SECONDS
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$python" -m pip install -q --no-build-isolation --no-deps --no-compile \
    --target "$target" "packages/$1" >"$out/build-$1.log" 2>&1 || { tail -30 "$out/build-$1.log"; return 1; }
  echo "   $1 built in $((SECONDS - start)) s"
}
suite() {  # suite <package>: its tests, in parallel where pytest-xdist is installed
  [[ " ${GPU_CHECK_SUITES:-fused-optim optree-core diffopt} " == *" $1 "* ]] || return 0
  local parallel
  parallel=$("$python" -c "import xdist" 2>/dev/null && echo "-n 8")
  echo "== $1 tests"
  "$python" -m pytest -q -p no:cacheprovider -rfs $parallel "packages/$1/tests" 2>&1 | tee "$out/tests-$1.log" \
    | grep -E "passed|failed|error|SKIPPED|FAILED" | tail -15
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

echo "== building into $target"
FUSED_OPTIM_CUDA=ON build fused-optim || exit 1
suite fused-optim
if build optree-core; then
  suite optree-core
  PYTHONPATH=$PWD/packages/diffopt/src:$PYTHONPATH suite diffopt  # pure Python: no build backend needed
else
  echo "   optree-core did not build (abseil missing?): optree-core and diffopt not checked"
  status=1
fi

if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
  echo "== benchmark"
  "$python" benchmarks/optim/bench_optim.py --device cuda -q --bench-report "$out/bench_optim_cuda.md" \
    --benchmark-json "$out/bench_optim_cuda.json" || status=1
fi
exit "$status"
