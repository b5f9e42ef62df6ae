#!/usr/bin/env bash
# One-stop, idempotent set-up on a fresh Debian machine:
#   1. system packages (abseil headers, graphviz's `dot`) through apt-get,
#   2. .venv: the pinned CPU torch, the dev tools and the whole stack (what the demo and the
#      diffopt tests use),
#   3. each package's release artifacts, built by ci/release.py exactly as a release builds them:
#      an sdist in dist/sdist and a wheel in dist/wheels (fused-optim compiled against the
#      installed torch; the compiled wheels repaired by auditwheel to a manylinux tag),
#   4. two more virtualenvs proving each package installs without the others it does not need:
#      .venv-optree-core (optree-core alone, no torch) and .venv-fused-optim (torch + fused-optim,
#      no optree-core). Each package's tests run against these installed wheels. Their
#      dependencies install in the background during step 2.
# Each step is skipped when what it would produce is already there and up to date, so
# re-running it on a ready machine takes seconds and changes nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DIFFOPT_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
WHEELS="$ROOT/dist/wheels"
CONSTRAINTS="$ROOT/ci/constraints.txt"

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

fingerprint() {  # content hash of files, ignoring build outputs and caches
  (cd "$ROOT" && find "$@" -type f \
      -not -path '*/build/*' -not -path '*/__pycache__/*' -not -path '*/.pytest_cache/*' \
      -not -path '*/.hypothesis/*' -not -name '*.so' -not -path '*.egg-info/*' -print0 2>/dev/null \
    | sort -z | xargs -0 sha1sum | sha1sum | cut -d' ' -f1)
}
up_to_date() { [ -f "$1/.stamps/$2" ] && [ "$(cat "$1/.stamps/$2")" = "$3" ]; }
stamp() { mkdir -p "$1/.stamps" && echo "$3" >"$1/.stamps/$2"; }

make_venv() {  # make_venv DIR requirements-file...
  local dir="$1"
  shift
  if [ ! -x "$dir/bin/python" ]; then
    log "creating virtualenv $dir"
    "$PY" -m venv "$dir"
  fi
  local h
  h="$(fingerprint ci/requirements-*.txt ci/constraints.txt)$*"
  if ! up_to_date "$dir" requirements "$h"; then
    log "installing Python dependencies into $dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    local args=()
    for req in "$@"; do args+=(-r "$ROOT/$req"); done
    "$dir/bin/python" -m pip install -q -c "$CONSTRAINTS" "${args[@]}"
    stamp "$dir" requirements "$h"
  fi
}

PACKAGES=()
for pkg in optree-core fused-optim diffopt; do
  [ -f "$ROOT/packages/$pkg/pyproject.toml" ] && PACKAGES+=("$pkg")
done
has() { [[ " ${PACKAGES[*]} " == *" $1 "* ]]; }

# --- 2. the virtualenvs' dependencies ------------------------------------------------------
# pip installs on one core: the one-package virtualenvs (step 4) get theirs in the background,
# beside the main one's, on the core it leaves idle (a minute of a fresh machine's set-up).
declare -A BACKGROUND=()  # log file -> pid
in_background() {  # in_background NAME COMMAND...: run it, its output to a log shown at the join
  local file="$ROOT/dist/.setup-$1.log"
  mkdir -p "$ROOT/dist"
  "${@:2}" >"$file" 2>&1 &
  BACKGROUND[$file]=$!
}
join_background() {
  local file status=0
  for file in "${!BACKGROUND[@]}"; do
    wait "${BACKGROUND[$file]}" || status=$?
    cat "$file" >&2
    rm -f "$file"
  done
  BACKGROUND=()
  return "$status"
}
if has optree-core; then in_background optree-core-venv make_venv "$ROOT/.venv-optree-core" ci/requirements-test.txt; fi
if has fused-optim; then
  in_background fused-optim-venv make_venv "$ROOT/.venv-fused-optim" ci/requirements-test.txt ci/requirements-torch.txt
fi
make_venv "$VENV" ci/requirements-dev.txt
VPY="$VENV/bin/python"

# --- 3. release artifacts, and the main venv's copy of each package ----------------------
# Dependency order. Every virtualenv installs these repaired wheels, so the tests run what a user
# installs (`nox -s release_check` then installs each into a fresh virtualenv).
mkdir -p "$WHEELS"
wheel_of() { ls "$WHEELS"/"${1//-/_}"-*.whl 2>/dev/null | head -n 1; }
# optree-core also ships for the other CPythons (dist/wheels-cpython, proven by release_check);
# built with it, so a changed optree-core rebuilds all of them. None missing: all three present.
build_args() { [ "$1" = optree-core ] && echo --pythons all; true; }
extra_missing() {
  [ "$1" = optree-core ] && [ "$(ls "$ROOT"/dist/wheels-cpython/optree_core-*.whl 2>/dev/null | wc -l)" -lt 3 ]
}

# A package's artifacts change with its sources and with how they are built.
artifact_hash() { fingerprint "packages/$1" ci/release.py; }

install_wheel() {  # install_wheel VENV PACKAGE
  local h
  h="$(artifact_hash "$2")"
  if ! up_to_date "$1" "$2" "$h" || ! "$1/bin/python" -m pip show -q "$2" >/dev/null 2>&1; then
    "$1/bin/python" -m pip install -q --no-deps --force-reinstall "$(wheel_of "$2")"
    stamp "$1" "$2" "$h"
  fi
}

for pkg in "${PACKAGES[@]}"; do
  h="$(artifact_hash "$pkg")"
  if ! up_to_date "$ROOT/dist" "$pkg" "$h" || [ -z "$(wheel_of "$pkg")" ] || extra_missing "$pkg"; then
    log "building the $pkg sdist and wheel(s)"
    # shellcheck disable=SC2046  # build_args prints separate words on purpose
    "$VPY" "$ROOT/ci/release.py" build "$pkg" $(build_args "$pkg")
    stamp "$ROOT/dist" "$pkg" "$h"
  fi
  install_wheel "$VENV" "$pkg"
done

# --- 4. one package at a time -------------------------------------------------------------
join_background || { log "a one-package virtualenv's dependencies failed to install (above)"; exit 1; }
if has optree-core; then install_wheel "$ROOT/.venv-optree-core" optree-core; fi
if has fused-optim; then install_wheel "$ROOT/.venv-fused-optim" fused-optim; fi
log "ready: $VENV (the whole stack) and the one-package virtualenvs"
