#!/usr/bin/env bash
# One-stop, idempotent set-up on a fresh Debian machine:
#   1. system packages (abseil headers, graphviz's `dot`) through apt-get,
#   2. a virtualenv in .venv with the pinned CPU torch and the dev tools,
#   3. the three packages built and installed in dependency order.
# Each step is skipped when what it would produce is already there and up to date,
# so re-running it on a ready machine takes seconds and changes nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DIFFOPT_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
STAMPS="$VENV/.stamps"

log() { printf '[setup] %s\n' "$*" >&2; }

# --- 1. system packages ------------------------------------------------------------------
APT_PACKAGES=(libabsl-dev graphviz cmake g++)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. virtualenv + Python dependencies ---------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
mkdir -p "$STAMPS"
VPY="$VENV/bin/python"

fingerprint() {  # content hash of files, ignoring build outputs and caches
  (cd "$ROOT" && find "$@" -type f \
      -not -path '*/build/*' -not -path '*/__pycache__/*' -not -path '*/.pytest_cache/*' \
      -not -path '*/.hypothesis/*' -not -name '*.so' -not -path '*.egg-info/*' -print0 2>/dev/null \
    | sort -z | xargs -0 sha1sum | sha1sum | cut -d' ' -f1)
}

up_to_date() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }

req_hash="$(fingerprint ci/requirements-dev.txt ci/constraints.txt)"
if ! up_to_date requirements "$req_hash"; then
  log "installing Python dependencies (torch pinned by ci/constraints.txt)"
  "$VPY" -m pip install -q --upgrade pip
  "$VPY" -m pip install -q -c "$ROOT/ci/constraints.txt" -r "$ROOT/ci/requirements-dev.txt"
  echo "$req_hash" >"$STAMPS/requirements"
fi

# --- 3. our packages, in dependency order -------------------------------------------------
# fused-optim must compile against the installed torch, hence --no-build-isolation for all.
for pkg in optree-core fused-optim diffopt; do
  dir="packages/$pkg"
  [ -f "$ROOT/$dir/pyproject.toml" ] || continue
  h="$(fingerprint "$dir")"
  if ! up_to_date "$pkg" "$h" || ! "$VPY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    log "building $pkg"
    "$VPY" -m pip install -q --no-build-isolation --no-deps -c "$ROOT/ci/constraints.txt" "$ROOT/$dir"
    echo "$h" >"$STAMPS/$pkg"
  fi
done
log "ready: $VENV"
