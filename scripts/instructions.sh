#!/usr/bin/env bash
# Instructions per hook call of `metahooks serve` and of the anchor it is measured against
# (examples/limit_server.rs), counted by valgrind's callgrind: unlike req/s, the count
# hardly moves with what else the machine is doing, so it shows what a change saved
# when scripts/load.sh's spread is wider than the change.
#
#   scripts/instructions.sh [SIZE_KIB] [MODE] [SECONDS]     defaults: 12 steady 8
#
# MODE "steady" repeats one request (a memo hit; anchor: the floor), "edited" changes the
# definition every call (anchor: JSON + YAML). Each server runs under callgrind, is warmed
# up, has its counters zeroed, serves wrk (-t1 -c4) for SECONDS and is dumped; the count
# is the process's user-space instructions (every thread: the log writer's too) divided
# by the requests wrk completed. Kernel work (socket I/O, wake-ups) is not counted.
# Under valgrind the CPU reports no SHA extensions, so sha2 hashes in software: with
# "edited", the definition's SHA-256 costs ours about 0.84M instructions per call at
# 31 KiB (11 % of the count) where the native SHA-NI path costs about 1 % of the CPU time
# (`perf record`, same load). Read an edited ratio with that share taken out.
# Installs valgrind and wrk from Debian if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
kib="${1:-12}"; mode="${2:-steady}"; seconds="${3:-8}"

. scripts/lib/debian.sh
install_missing valgrind wrk
cargo build --release --quiet --bin metahooks --example limit_server
target="${CARGO_TARGET_DIR:-target}/release"
. scripts/lib/background.sh

request="$work/request-$kib.json"
"$target/examples/limit_server" request --kib "$kib" >"$request"

count() { # NAME PORT CMD... -> "NAME instructions-per-call requests"
  local name="$1" port="$2"; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.%p" "$@" >/dev/null 2>"$work/$name.valgrind" &
  local pid=$!
  wait_http "http://127.0.0.1:$port/" 60 # valgrind starts slowly
  wrk -t1 -c4 -d3s --timeout 60s -s scripts/load/edit.lua "http://127.0.0.1:$port/apimock/sync" \
    -- "$request" "$mode" 1 >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local requests
  requests=$(wrk -t1 -c4 -d"${seconds}s" --timeout 60s -s scripts/load/edit.lua \
    "http://127.0.0.1:$port/apimock/sync" -- "$request" "$mode" 2 |
    awk '/ requests in / { print $1 }')
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The dump made on request is the file with a part number; it counts from the zeroing.
  local dump instructions
  dump=$(ls "$work/$name".*.* | head -1)
  instructions=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
  requests=${requests:-0}
  echo "$name $((instructions / (requests > 0 ? requests : 1))) $requests"
}

ours=$(port); anchor=$(port); probes=$(port)
if [ "$mode" = steady ]; then anchor_flag=--floor anchor_name=floor; else anchor_flag=--yaml anchor_name=json+yaml; fi
read -r _ ours_ir ours_n < <(count metahooks "$ours" "${MHTEST_BIN:-$target/metahooks}" serve \
  --listen "127.0.0.1:$ours" --probe-listen "127.0.0.1:$probes" --shutdown-delay-seconds 0)
read -r _ anchor_ir anchor_n < <(count anchor "$anchor" "$target/examples/limit_server" serve \
  --listen "127.0.0.1:$anchor" "$anchor_flag")
# Calls still in flight when the counters are zeroed or dumped are counted in part: a
# window of a few calls gives a per-call figure that is mostly that error.
if [ "$ours_n" -lt 100 ] || [ "$anchor_n" -lt 100 ]; then
  echo "instructions.sh: under 100 calls in the window; the figures below are rough (give more SECONDS)" >&2
fi
printf '%s KiB %s: metahooks %d instructions per call (%d calls), %s %d (%d calls), ratio %.3f\n' \
  "$kib" "$mode" "$ours_ir" "$ours_n" "$anchor_name" "$anchor_ir" "$anchor_n" \
  "$(awk -v a="$ours_ir" -v b="$anchor_ir" 'BEGIN { print a / b }')"
