#!/usr/bin/env bash
# Checks that the Dockerfile's runtime stage can run the binary: every shared library the
# binary links (ldd) must belong to a Debian package the runtime base image ships, and the
# build stage must install the headers the build needs instead of assuming them.
#
# usage: scripts/check-image.sh [BINARY]   (default: target/debug/metahooks; the linked
#        libraries do not depend on the build profile)
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:-target/debug/metahooks}"
[ -x "$binary" ] || { echo "check-image: $binary not built (cargo build first)" >&2; exit 2; }

# The image of each FROM line (its first word that is not a --flag such as --platform).
mapfile -t froms < <(grep -E '^FROM ' Dockerfile | awk '{for (i = 2; i <= NF; i++) if ($i !~ /^--/) {print $i; break}}')
[ "${#froms[@]}" -ge 2 ] || { echo "check-image: expected a build and a runtime stage in Dockerfile" >&2; exit 1; }
build_base="${froms[0]}"
runtime_base="${froms[${#froms[@]}-1]}"

# What each runtime base we know ships (Debian packages), from its published contents.
case "$runtime_base" in
  gcr.io/distroless/cc-debian12*)
    provides="base-files ca-certificates libc6 libssl3 netbase openssl tzdata libgcc-s1 libgomp1 libstdc++6" ;;
  gcr.io/distroless/base-debian12*)
    provides="base-files ca-certificates libc6 libssl3 netbase openssl tzdata" ;;
  gcr.io/distroless/static-debian12*)
    provides="base-files ca-certificates netbase tzdata" ;;
  *)
    echo "check-image: unknown runtime base $runtime_base: add its package list to this script" >&2
    exit 1 ;;
esac
case "$build_base" in
  *bookworm*) ;;
  *) echo "check-image: build stage $build_base is not Debian 12 (bookworm) like the runtime stage; glibc and libssl versions would not match" >&2; exit 1 ;;
esac

package_of() { # a library path -> its Debian package (merged /usr aware)
  local path="$1" candidate
  for candidate in "$path" "$(realpath "$path")" "/usr$path"; do
    if out=$(dpkg -S "$candidate" 2>/dev/null); then
      echo "${out%%:*}"
      return
    fi
  done
  echo "?"
}

failures=0
while read -r line; do
  lib=$(awk '{ if ($2 == "=>") print $3; else print $1 }' <<<"$line")
  case "$lib" in linux-vdso.so.*|"") continue ;; esac
  package=$(package_of "$lib")
  if [[ " $provides " == *" $package "* ]]; then
    echo "ok       $lib ($package)"
  else
    echo "MISSING  $lib ($package) is not in $runtime_base"
    failures=$((failures + 1))
  fi
done < <(ldd "$binary")

if ! grep -qE 'apt-get install.*libssl-dev' Dockerfile; then
  echo "MISSING  the build stage does not install libssl-dev (git2 builds against it)"
  failures=$((failures + 1))
fi
# The build stage sees only what it COPYs: every workspace member, and every file the
# code embeds at compile time (include_str!/include_bytes!), must be under a copied path.
mapfile -t copied < <(awk '/^FROM /{stage++} stage==1 && /^COPY /{for (i = 2; i < NF; i++) print $i}' Dockerfile)
is_copied() {
  local path="$1" source
  for source in "${copied[@]}"; do
    source="${source%/}"
    [[ "$path" == "$source" || "$path" == "$source"/* ]] && return 0
  done
  return 1
}
needed=()
while read -r member; do needed+=("$member/Cargo.toml"); done \
  < <(sed -n '/^\[workspace\]/,/^\[/{s/^members = \[\(.*\)\]/\1/p}' Cargo.toml | tr -d '" ' | tr ',' '\n')
while IFS=: read -r file embedded; do
  needed+=("$(realpath -m --relative-to=. "$(dirname "$file")/$embedded")")
done < <(grep -rhoE --include='*.rs' 'include_(str|bytes)!\("[^"]+"\)' src crates -H \
  | sed -E 's/include_(str|bytes)!\("([^"]+)"\)/\2/')
for path in "${needed[@]}"; do
  if ! is_copied "$path"; then
    echo "MISSING  the build stage does not COPY $path, which the build reads"
    failures=$((failures + 1))
  fi
done

if [ "$failures" -gt 0 ]; then
  echo "check-image: $failures problem(s)"
  exit 1
fi
echo "check-image: every linked library is in $runtime_base"
