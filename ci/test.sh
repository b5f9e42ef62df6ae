#!/usr/bin/env bash
# The README's test command: full set-up, then every test of every package, and the proof that
# each release artifact installs alone into a fresh virtualenv (release_check). benchmarks_smoke
# runs every benchmark once on tiny workloads (no peers, no timing kept).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/ci/setup.sh"
cd "$ROOT"
exec "${DIFFOPT_VENV:-$ROOT/.venv}/bin/nox" -s lint format typecheck tests tests_tooling benchmarks_smoke release_check "$@"
