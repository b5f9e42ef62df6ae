#!/usr/bin/env bash
# The README's main-job command: full set-up, then the demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/ci/setup.sh"
cd "$ROOT"
exec "${DIFFOPT_VENV:-$ROOT/.venv}/bin/nox" -s demo "$@"
