#!/usr/bin/env bash
# Build optree-core with AddressSanitizer + UndefinedBehaviorSanitizer into a throwaway virtualenv,
# fuzz its bindings (fuzz_bindings.py), then run the test suite under the same build.
# Fails on any sanitizer report, crash or hang. Opt-in (`nox -s sanitize`), not part of CI's run.
#
#   bash packages/optree-core/tests/sanitize/run.sh [--seconds N] [--seed S] [--threads T]
#                                                    [--no-tests] [--rebuild]
#
# Environment: OPTREE_CORE_SANITIZE_DIR (work dir, default /tmp/optree-core-sanitize),
# PYTHON (interpreter for the venv, default python3), CXX (default g++),
# OPTREE_CORE_SANITIZE_CXXFLAGS (extra compiler flags, e.g. -fno-sanitize=shift to look past a
# known finding while hunting others).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="$(cd "$HERE/../.." && pwd)"
ROOT="$(cd "$PKG/../.." && pwd)"
WORK="${OPTREE_CORE_SANITIZE_DIR:-/tmp/optree-core-sanitize}"
PY="${PYTHON:-python3}"
CXX="${CXX:-g++}"
SECONDS_BUDGET=120
SEED="${FUZZ_SEED:-$(date +%s)}"
THREADS=3
RUN_TESTS=1
REBUILD=0

while (($#)); do
  case "$1" in
    --seconds) SECONDS_BUDGET="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --no-tests) RUN_TESTS=0; shift ;;
    --rebuild) REBUILD=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

log() { printf '[sanitize] %s\n' "$*" >&2; }

VENV="$WORK/venv"
BUILD="$WORK/build"
LOGS="$WORK/logs"
mkdir -p "$WORK" "$LOGS"
((REBUILD)) && rm -rf "$VENV" "$BUILD"

# --- 1. a throwaway venv with the build tools (and the test tools) --------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c "$ROOT/ci/constraints.txt" \
    "scikit-build-core>=0.10" "nanobind>=2.4" "pytest>=8" "hypothesis>=6.100"
fi

# --- 2. the sanitizer build -------------------------------------------------------------------
# The interpreter is not instrumented, so the ASan runtime must be loaded first (LD_PRELOAD).
# libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw
# interceptor must find the real one at start-up or every C++ exception aborts.
ASAN_RT="$("$CXX" -print-file-name=libasan.so)"
STDCXX_RT="$("$CXX" -print-file-name=libstdc++.so)"
# -fno-sanitize-recover turns every UBSan finding into an abort instead of a printed warning;
# -O1 keeps the fuzz loop fast enough while staying debuggable.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
log "building optree-core with $SAN (build dir $BUILD)"
# The build imports the fresh extension (nanobind's stub generation), hence the preload here too.
CXX="$CXX" LD_PRELOAD="$ASAN_RT $STDCXX_RT" ASAN_OPTIONS=detect_leaks=0 \
  "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall \
  -C "build-dir=$BUILD" \
  -C cmake.build-type=Debug \
  -C "cmake.define.CMAKE_CXX_FLAGS=$SAN -O1 -g ${OPTREE_CORE_SANITIZE_CXXFLAGS:-}" \
  -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined" \
  -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
  "$PKG"

SO="$(find "$VENV" -path '*optree_core/_C*.so' | head -n1)"
if [ -z "$SO" ] || ! grep -q libasan <<<"$(ldd "$SO")"; then
  log "the installed extension is not linked against libasan: $SO"
  exit 1
fi

# --- 3. run under the sanitizers --------------------------------------------------------------
# CPython's deliberate "leaks" at exit are not ours (detect_leaks=0); PYTHONMALLOC=malloc routes
# Python objects through ASan's allocator so use-after-free on them is caught too.
export LD_PRELOAD="$ASAN_RT $STDCXX_RT"
# Reports go to files (log_path), so pytest's fd capture or a child process cannot swallow them;
# allocator_may_return_null lets a corrupted pickle's absurd length end in MemoryError, as it
# does without ASan, instead of an allocation-size-too-big abort.
rm -rf "$LOGS"/asan.* "$LOGS"/ubsan.* "$LOGS/reports"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:exitcode=86:strict_init_order=1:detect_stack_use_after_return=0:allocator_may_return_null=1:log_path=$LOGS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87:log_path=$LOGS/ubsan"
export PYTHONMALLOC=malloc
export PYTHONFAULTHANDLER=1
# ASan's redzones make every C++ frame several times larger, so deep-but-legal trees (up to
# MAX_RECURSION_DEPTH) would overflow the default 8 MiB stack in this build only. Give the main
# thread and new threads (glibc sizes them from RLIMIT_STACK) 64 MiB; the ordinary suite checks
# the release build's stack use at the default size.
ulimit -s 65536 2>/dev/null || log "could not raise the stack limit; deep-tree tests may overflow"

status=0
check_log() {  # $1: log file, $2: exit code of the run, $3: highest exit code that is no crash
  local pattern="ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" found=0 r
  for r in "$LOGS"/asan.* "$LOGS"/ubsan.*; do
    [ -e "$r" ] || continue
    if grep -Eq "$pattern" "$r"; then
      found=1
      mkdir -p "$LOGS/reports" && mv "$r" "$LOGS/reports/"
      log "SANITIZER REPORT $LOGS/reports/$(basename "$r") (run log $1):"
      grep -E -A40 "$pattern" "$LOGS/reports/$(basename "$r")" | head -60 >&2 || true
    else
      rm -f "$r"  # only allocator warnings (allocator_may_return_null): no finding
    fi
  done
  if grep -Eq "$pattern" "$1"; then
    found=1
    log "SANITIZER REPORT in $1:"
    grep -E -A40 "$pattern" "$1" | head -60 >&2 || true
  fi
  ((found)) && return 1
  if [ "$2" -gt "${3:-0}" ]; then
    log "run failed with exit code $2 (see $1)"
    tail -40 "$1" >&2
    return 1
  fi
}

log "fuzzing for ${SECONDS_BUDGET}s with seed $SEED ($THREADS threads); log: $LOGS/fuzz.log"
set +e
timeout --signal=KILL "$((SECONDS_BUDGET + 600))" "$VENV/bin/python" "$HERE/fuzz_bindings.py" \
  --seconds "$SECONDS_BUDGET" --seed "$SEED" --threads "$THREADS" >"$LOGS/fuzz.log" 2>&1
rc=$?
set -e
tail -3 "$LOGS/fuzz.log" >&2
check_log "$LOGS/fuzz.log" "$rc" || status=1

if ((RUN_TESTS)); then
  log "running the test suite under the sanitizers; log: $LOGS/pytest.log"
  set +e
  (cd "$PKG/tests" && timeout --signal=KILL 1200 "$VENV/bin/python" -m pytest "$PKG/tests" -q \
      -p no:cacheprovider -m "not slow" --capture=sys --ignore="$HERE") >"$LOGS/pytest.log" 2>&1
  rc=$?
  set -e
  tail -3 "$LOGS/pytest.log" >&2
  # Exit code 1 is failing assertions (the normal suite reports those); only a sanitizer report,
  # a crash or a hang fails this session.
  ((rc == 1)) && log "note: some tests fail (not a sanitizer finding); see $LOGS/pytest.log"
  check_log "$LOGS/pytest.log" "$rc" 1 || status=1
fi

if ((status)); then
  log "FAILED (seed $SEED)"
else
  log "clean: no sanitizer report (seed $SEED)"
fi
exit "$status"
