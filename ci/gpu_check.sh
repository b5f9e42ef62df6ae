#!/usr/bin/env bash
# fused-optim on a machine with an NVIDIA GPU: builds the CUDA kernels, runs the package's whole
# test suite (the CUDA tests included) and the step/differentiable benchmark on the GPU.
# CI has no GPU, so this is run by hand where one is lent. It expects a CUDA torch, nvcc,
# scikit-build-core, cmake and pytest in $PYTHON's environment (nothing is downloaded).
#
#   bash ci/gpu_check.sh [OUT_DIR]      # logs land in OUT_DIR (default out/gpu)
#   FUSED_OPTIM_CUDA_ARCHS=90 bash ci/gpu_check.sh   # build for this GPU only (faster)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/gpu}
python=${PYTHON:-python3}
mkdir -p "$out"

nvidia-smi -L || exit 1
"$python" -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'; \
print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())" || exit 1

target=$(mktemp -d)
echo "== building fused-optim with CUDA into $target"
start=$SECONDS
FUSED_OPTIM_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$python" -m pip install -q --no-build-isolation \
  --no-deps --no-compile --target "$target" packages/fused-optim >"$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
echo "   built in $((SECONDS - start)) s"
export PYTHONPATH=$target

echo "== tests"
parallel=$("$python" -c "import xdist" 2>/dev/null && echo "-n 8")
"$python" -m pytest -q -p no:cacheprovider -rf $parallel packages/fused-optim/tests 2>&1 | tee "$out/tests.log" | tail -25
status=${PIPESTATUS[0]}

echo "== benchmark"
"$python" benchmarks/optim/bench_optim.py --device cuda 2>&1 | tee "$out/bench_optim_cuda.md"
exit "$status"
