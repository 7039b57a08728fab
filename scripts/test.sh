#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs the pinned oracles the tests compare
# against (kubernetes-validate from PyPI, Prism from npm) into .tools/, then runs every
# Rust test with them required, then the offline manifest checks.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${METAHOOKS_TOOLS_DIR:-$PWD/.tools}"
KUBERNETES_VALIDATE_VERSION=1.37.0
PRISM_VERSION=5.14.2

# libgit2 is built against the system OpenSSL.
if ! pkg-config --exists openssl 2>/dev/null; then
  echo "== installing libssl-dev and pkg-config (needed to build libgit2 with https)"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libssl-dev pkg-config; else sudo apt-get update -qq && sudo apt-get install -y -qq libssl-dev pkg-config; fi
fi

mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/venv/bin/kubernetes-validate" ]; then
  echo "== installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
if [ ! -x "$TOOLS/npm/node_modules/.bin/prism" ]; then
  echo "== installing @stoplight/prism-cli $PRISM_VERSION"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" "@stoplight/prism-cli@$PRISM_VERSION"
fi

export METAHOOKS_REQUIRE_ORACLES=1
export METAHOOKS_KUBERNETES_VALIDATE="$TOOLS/venv/bin/kubernetes-validate"
export METAHOOKS_PRISM="$TOOLS/npm/node_modules/.bin/prism"

echo "== cargo test"
cargo test --locked --all-targets

if command -v kubectl >/dev/null 2>&1; then
  echo "== kubectl kustomize manifests/ (offline render)"
  kubectl kustomize manifests/ > /dev/null
  echo "manifests render"
fi
