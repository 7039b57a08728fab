#!/usr/bin/env bash
# Throughput and tail of `metahooks serve` next to anchor servers
# (examples/limit_server.rs) on the same request bytes, with wrk on loopback.
#
#   scripts/load.sh [ROUNDS] [SECONDS] [SIZES_KIB]      defaults: 5 5 "12 31 2000"
#
# For each request size: "steady" posts the same APIMock again and again (the definition
# is unchanged, as in a resync), against the floor (a server that reads the body, hashes
# it and sends the answer it remembers for that hash: what a memo hit cannot undercut);
# "edited" changes the definition on every call, against the limit that parses the
# request JSON and the definition's YAML once and writes the answer. The two servers run
# alternately, ROUNDS times each; the table shows medians, the min–max spread of req/s
# (a wide spread means the machine was noisy), the ratios of the medians and, as
# "paired", the median of each round's ratio (a round of ours and the anchor's round
# right after it share the machine's state of the moment, so drift in what else the
# machine runs cancels out of it better than out of the ratio of medians).
# While metahooks is loaded, /readyz is polled and its p99 reported (it must stay fast);
# the anchor is polled the same way so both share the machine with the same extra load
# (LOAD_POLL=0 polls neither, for figures without that load).
# The largest default size, 2000 KiB, carries a definition just under what one ConfigMap
# can hold (requests carry it twice: in the APIMock and in the observed ConfigMap).
# MHTEST_BIN measures another build of metahooks (say, a copy of an earlier one)
# against the same anchors. Installs wrk from Debian if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
seconds="${2:-5}"
sizes="${3:-12 31 2000}"
connections="${LOAD_CONNECTIONS:-4}"
poll="${LOAD_POLL:-1}" # 0: no prober at all (neither server is polled)

. scripts/lib/debian.sh
install_missing wrk

cargo build --release --quiet --bin metahooks --example limit_server
target="${CARGO_TARGET_DIR:-target}/release"
. scripts/lib/background.sh

ours=$(port); probe=$(port); floor=$(port); limit_yaml=$(port)
ours_bin="${MHTEST_BIN:-$target/metahooks}"
"$ours_bin" serve --listen "127.0.0.1:$ours" --probe-listen "127.0.0.1:$probe" \
  --shutdown-delay-seconds 0 >/dev/null 2>&1 & pids+=($!)
"$target/examples/limit_server" serve --listen "127.0.0.1:$floor" --floor 2>/dev/null & pids+=($!)
"$target/examples/limit_server" serve --listen "127.0.0.1:$limit_yaml" --yaml 2>/dev/null & pids+=($!)
wait_http "http://127.0.0.1:$probe/readyz"
wait_http "http://127.0.0.1:$floor/"
wait_http "http://127.0.0.1:$limit_yaml/"

run=0
load() { # PORT REQUEST_FILE MODE SECONDS -> "rps p50 p99"
  run=$((run + 1))
  wrk -t1 -c"$connections" -d"$4"s --timeout 30s -s scripts/load/edit.lua \
    "http://127.0.0.1:$1/apimock/sync" -- "$2" "$3" "$run" |
    awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                     if (v["errors"] > 0) { print "load.sh: " v["errors"] " errors" > "/dev/stderr" }
                     print v["rps"], v["p50_ms"], v["p99_ms"] }'
}
probe_while() { # URL OUT CMD... — runs CMD while polling URL; appends latencies (s) to OUT
  # Twenty probes a second, as a kubelet with several probes would at most; a tighter loop
  # would take a core from the server it measures. The limit is polled the same way
  # (any path; it answers 404) so both servers share the machine with the same curl load.
  local url="$1" out="$2"; shift 2
  if [ "$poll" = 0 ]; then "$@"; return; fi
  ( while :; do curl -s -o /dev/null -w '%{time_total}\n' "$url"; sleep 0.05; done ) \
    >>"$out" & local poller=$!
  "$@"
  kill "$poller"; wait "$poller" 2>/dev/null || true
}
spread() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f–%.0f", lo, hi }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf '%-6s %-7s %-11s %12s %15s %10s %12s %15s %10s %7s %7s %9s\n' size mode anchor \
  "ours req/s" "ours spread" "ours p99" "anchor req/s" "anchor spread" "anchor p99" ratio paired "p99 ratio"
for kib in $sizes; do
  file="$work/request-$kib.json"
  "$target/examples/limit_server" request --kib "$kib" >"$file"
  for mode in steady edited; do
    if [ "$mode" = steady ]; then limit=$floor anchor=floor; else limit=$limit_yaml anchor=json+yaml; fi
    load "$ours" "$file" "$mode" 1 >/dev/null; load "$limit" "$file" "$mode" 1 >/dev/null
    : >"$work/ours"; : >"$work/limit"
    for _ in $(seq "$rounds"); do
      probe_while "http://127.0.0.1:$probe/readyz" "$work/probes.s" \
        load "$ours" "$file" "$mode" "$seconds" >>"$work/ours"
      probe_while "http://127.0.0.1:$limit/" "$work/limit-polls.s" \
        load "$limit" "$file" "$mode" "$seconds" >>"$work/limit"
    done
    o_rps=$(cut -d' ' -f1 "$work/ours" | median); o_p99=$(cut -d' ' -f3 "$work/ours" | median)
    l_rps=$(cut -d' ' -f1 "$work/limit" | median); l_p99=$(cut -d' ' -f3 "$work/limit" | median)
    o_spread=$(cut -d' ' -f1 "$work/ours" | spread); l_spread=$(cut -d' ' -f1 "$work/limit" | spread)
    paired=$(paste -d' ' "$work/ours" "$work/limit" | awk '{ print $1 / $4 }' | median)
    printf '%-6s %-7s %-11s %12.0f %15s %8.2fms %12.0f %15s %8.2fms %7.2f %7.2f %9.2f\n' "${kib}K" "$mode" "$anchor" \
      "$o_rps" "$o_spread" "$o_p99" "$l_rps" "$l_spread" "$l_p99" \
      "$(awk -v a="$o_rps" -v b="$l_rps" 'BEGIN { print a / b }')" "$paired" \
      "$(awk -v a="$o_p99" -v b="$l_p99" 'BEGIN { print a / b }')"
  done
done
touch "$work/probes.s"
probes=$(wc -l <"$work/probes.s")
probe_p99=$(sort -g "$work/probes.s" | awk -v n="$probes" 'NR == int(n * 0.99 + 0.5) { printf "%.1f", $1 * 1000 }')
if [ "$probes" -gt 0 ]; then
  echo "readyz while metahooks was loaded: $probes probes, p99 ${probe_p99} ms"
else
  echo "readyz not polled (LOAD_POLL=0)"
fi
echo "metahooks RSS after the run: $(awk '/VmRSS/ {print $2}' "/proc/${pids[0]}/status") KiB"
