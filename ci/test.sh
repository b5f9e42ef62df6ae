#!/usr/bin/env bash
# The README's test command: full set-up, then every test of every package, and the proof that
# each release artifact installs alone into a fresh virtualenv (release_check). benchmarks_smoke
# runs every benchmark once on tiny workloads (no peers, no timing kept). isa_matrix reruns the
# doctests and the numerical tests under each CPU build of fused-optim's loops and torch's kernels
# the machine has (ci/isa_matrix.py says which run where; about 2-3 minutes on 2 cores), so an
# example or test that depends on this CPU's rounding fails where it is written.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/ci/setup.sh"
cd "$ROOT"
exec "${DIFFOPT_VENV:-$ROOT/.venv}/bin/nox" -s lint format typecheck tests tests_tooling isa_matrix benchmarks_smoke release_check "$@"
