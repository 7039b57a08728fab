#!/usr/bin/env bash
# CPU time and context switches per hook call of `metahooks serve` and of the anchor it is
# measured against (examples/limit_server.rs), counted by `perf stat` on each process
# while wrk (-t1 -c4) loads it. Where instructions.sh counts the work a call does in user
# space, this shows what it costs in the kernel and the scheduler: a call that hops
# between threads pays wake-ups and colder caches that no instruction count shows.
#
#   scripts/switches.sh [SIZE_KIB] [MODE] [SECONDS] [ROUNDS]     defaults: 12 edited 8 2
#
# MODE as in load.sh: "steady" (anchor: the floor) or "edited" (anchor: JSON + YAML).
# The two servers are measured alternately, ROUNDS times each. MHTEST_BIN measures
# another build of metahooks. Installs perf (linux-perf) and wrk from Debian if missing;
# perf needs kernel.perf_event_paranoid ≤ 2 for another process's software counters.
set -euo pipefail
cd "$(dirname "$0")/.."
kib="${1:-12}"; mode="${2:-edited}"; seconds="${3:-8}"; rounds="${4:-2}"

. scripts/lib/debian.sh
install_missing wrk
command -v perf >/dev/null 2>&1 || install_missing linux-perf
cargo build --release --quiet --bin metahooks --example limit_server
target="${CARGO_TARGET_DIR:-target}/release"
. scripts/lib/background.sh

request="$work/request-$kib.json"
"$target/examples/limit_server" request --kib "$kib" >"$request"

ours=$(port); anchor=$(port); probes=$(port)
if [ "$mode" = steady ]; then anchor_flag=--floor anchor_name=floor; else anchor_flag=--yaml anchor_name=json+yaml; fi
"${MHTEST_BIN:-$target/metahooks}" serve --listen "127.0.0.1:$ours" \
  --probe-listen "127.0.0.1:$probes" --shutdown-delay-seconds 0 >/dev/null 2>&1 & pids+=($!)
ours_pid=$!
"$target/examples/limit_server" serve --listen "127.0.0.1:$anchor" "$anchor_flag" 2>/dev/null & pids+=($!)
anchor_pid=$!
wait_http "http://127.0.0.1:$probes/readyz"
wait_http "http://127.0.0.1:$anchor/"

run=0
measure() { # NAME PID PORT -> "NAME req/s cpu-µs-per-call switches-per-call migrations-per-1000-calls"
  local name="$1" pid="$2" url="http://127.0.0.1:$3/apimock/sync" stat="$work/$1.perf"
  run=$((run + 1))
  wrk -t1 -c4 -d1s -s scripts/load/edit.lua "$url" -- "$request" "$mode" "$run" >/dev/null
  run=$((run + 1))
  local result
  result=$(perf stat -x, -e task-clock,context-switches,cpu-migrations -p "$pid" -o "$stat" -- \
    wrk -t1 -c4 -d"${seconds}s" --timeout 30s -s scripts/load/edit.lua "$url" -- "$request" "$mode" "$run" |
    awk '/^RESULT/')
  awk -F, -v name="$name" -v seconds="$seconds" -v result="$result" '
    BEGIN { n = split(result, fields, " "); for (i = 2; i <= n; i++) { split(fields[i], kv, "="); v[kv[1]] = kv[2] } }
    $3 == "task-clock" { ms = $1 } $3 == "context-switches" { cs = $1 } $3 == "cpu-migrations" { mig = $1 }
    END { calls = v["rps"] * seconds; if (calls < 1) calls = 1
          printf "%s %.0f %.0f %.2f %.1f\n", name, v["rps"], ms * 1000 / calls, cs / calls, mig * 1000 / calls }' "$stat"
}

printf '%-10s %-9s %10s %14s %14s %16s\n' round server "req/s" "CPU µs/call" "switches/call" "migrations/1k"
for round in $(seq "$rounds"); do
  for server in "metahooks $ours_pid $ours" "$anchor_name $anchor_pid $anchor"; do
    # shellcheck disable=SC2086 # NAME PID PORT, split on purpose
    read -r name rps cpu switches migrations < <(measure $server)
    printf '%-10s %-9s %10s %14s %14s %16s\n' "$round" "$name" "$rps" "$cpu" "$switches" "$migrations"
  done
done
echo "($kib KiB $mode; CPU time is every thread of the server's, the kernel's share included)"
