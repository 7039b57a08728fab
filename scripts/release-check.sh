#!/usr/bin/env bash
# Checks that everything a release names carries its version: the tag's version (vX.Y.Z
# without the v) must be Cargo.toml's, the chart's `version` and `appVersion`, the image
# tag the kustomize manifests deploy, and a section of CHANGELOG.md. The release workflow
# runs it on the tag; the test suite runs it on the version in Cargo.toml.
#   scripts/release-check.sh 0.1.0
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: scripts/release-check.sh X.Y.Z}"
problems=()
check() { # WHAT FOUND
  if [ "$2" != "$version" ]; then problems+=("$1 is ${2:-missing}, not $version"); fi
}
check "Cargo.toml's version" "$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
check "charts/metahooks/Chart.yaml's version" "$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/metahooks/Chart.yaml)"
check "charts/metahooks/Chart.yaml's appVersion" "$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/metahooks/Chart.yaml)"
check "the image tag of manifests/server/deployment.yaml" "$(sed -n 's/^ *image: ghcr.io\/metahooks\/metahooks:\(.*\)$/\1/p' manifests/server/deployment.yaml)"
if ! grep -q "^## $version " CHANGELOG.md; then
  problems+=("CHANGELOG.md has no section '## $version …'")
fi
if [ "${#problems[@]}" -gt 0 ]; then
  for problem in "${problems[@]}"; do echo "release $version: $problem" >&2; done
  exit 1
fi
echo "release $version: Cargo.toml, the chart, the manifests and the changelog agree"
