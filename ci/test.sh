#!/usr/bin/env bash
# The README's test command: full set-up, then every test of every package, and the proof that
# each release artifact installs alone into a fresh virtualenv (release_check). benchmarks_smoke
# runs every benchmark once on tiny workloads (no peers, no timing kept). isa_matrix reruns the
# doctests and the numerical tests under each CPU build of fused-optim's loops and torch's kernels
# the machine has, so an example or a test that depends on one CPU's rounding fails where it is
# written (ci/isa_matrix.py says what runs where: on CI's AVX2 box, about 2 minutes of CPU time,
# two suites at a time on 2 cores; the machine's own builds are left out, the suites above ran them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/ci/setup.sh"
cd "$ROOT"
exec "${DIFFOPT_VENV:-$ROOT/.venv}/bin/nox" -s lint format typecheck tests tests_tooling isa_matrix benchmarks_smoke release_check "$@"
