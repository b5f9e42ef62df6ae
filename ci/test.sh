#!/usr/bin/env bash
# The README's test command: full set-up, then every test of every package.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/ci/setup.sh"
cd "$ROOT"
exec "${DIFFOPT_VENV:-$ROOT/.venv}/bin/nox" -s lint format typecheck tests tests_tooling "$@"
