#!/usr/bin/env bash
# Scale-out benchmark: APIMOCKS APIMocks and MONITORED MonitoredServices over REPOS git
# repositories (a loopback `git daemon --verbose`, which logs every fetch), emulated by
# `metahooks emulate` against 1 and then 3 `metahooks serve` replicas called round-robin.
#
#   scripts/scale.sh [APIMOCKS] [MONITORED] [REPOS] [SECONDS] [REPLICA_COUNTS]
#   defaults:          10000       2000       20      0         "1 3"
#
# For each replica count it prints rounds and wall time to convergence, hook calls per
# parent, warm answer times (as the emulator saw them, and as the servers logged them: the
# difference is the HTTP round trip and the emulator's own share of the cores), git
# requests per repository per poll interval (10 s of real time: the source engine polls on
# the real clock, the emulator's clock is simulated), each replica's peak RSS and CPU time
# (its own, and its fetch workers'), and whether the final objects equal those of the
# first run (they must: which replica answered may not matter). SECONDS of simulated time
# are run after converging (each resync round syncs every parent: at the default size ~5 s
# per round with one replica on 2 cores; 120 simulated seconds took 21-23 rounds,
# 117-137 s of wall time with one replica and 152-188 s with three, in two runs; the count
# moves a little with when the real-clock source polls land).
# Warm answer times depend on whether a poll lands among the warm rounds: while its
# fetches run, the fetch workers (and here the git daemon's upload-packs) share the cores
# with the server, and the answer of each parent called meanwhile is made afresh once
# (its resync moves to 2 s while the fetch runs; the answer from before comes back from
# memory when it ends, and a later poll's pending answer does too). Compare runs with the
# same count of upload-pack requests.
# Needs git, python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
apimocks="${1:-10000}"; monitored="${2:-2000}"; repos="${3:-20}"; seconds="${4:-0}"
replica_counts="${5:-1 3}"
interval=10

cargo build --release --quiet --bin metahooks
bin="${CARGO_TARGET_DIR:-target}/release/metahooks"
. scripts/lib/background.sh

mkdir -p "$work/repos" "$work/in"
for i in $(seq 0 $((repos - 1))); do
  repo="$work/repos/repo-$i"
  git init -q "$repo"
  printf 'REPO=%s\nLEVEL=info\n' "$i" >"$repo/app.env"
  git -C "$repo" add app.env
  git -C "$repo" -c user.name=bench -c user.email=bench@example.invalid commit -qm config
done
git_port=$(port)
git daemon --verbose --export-all --reuseaddr --listen=127.0.0.1 --port="$git_port" \
  --base-path="$work/repos" "$work/repos" 2>"$work/git.log" & pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$git_port") 2>/dev/null && break; sleep 0.1; done
python3 scripts/scale/generate.py "$work/in" "$apimocks" "$monitored" "$repos" "git://127.0.0.1:$git_port"

first=""
for replicas in $replica_counts; do
  urls=(); servers=()
  for r in $(seq "$replicas"); do
    hook=$(port); probe=$(port)
    "$bin" serve --listen "127.0.0.1:$hook" --probe-listen "127.0.0.1:$probe" \
      --shutdown-delay-seconds 0 --allow-scheme git --allow-private-addresses \
      --log-level info,metahooks=debug --cache-dir "$work/cache-$replicas-$r" >"$work/server-$replicas-$r.log" 2>&1 & pids+=($!); servers+=($!)
    until curl -fs "http://127.0.0.1:$probe/readyz" >/dev/null 2>&1; do sleep 0.05; done
    urls+=(--hooks-url "http://127.0.0.1:$hook")
  done
  log_start=$(wc -l <"$work/git.log")
  start=$(date +%s%N)
  "$bin" emulate -f "$work/in" "${urls[@]}" --for-seconds "$seconds" --max-rounds 40 -o json \
    >"$work/report-$replicas.json" || true
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "== $replicas replica(s): $apimocks APIMocks, $monitored MonitoredServices, $repos repositories; wall time ${wall} ms"
  python3 scripts/scale/summarise.py "$work/report-$replicas.json" "$work/digest-$replicas" \
    "$work"/server-"$replicas"-*.log
  # A poll is one upload-pack request (the ref listing); a changed ref adds a second.
  fetches=$(tail -n +"$((log_start + 1))" "$work/git.log" | grep -c "Request upload-pack" || true)
  echo "  git upload-pack requests: $fetches in ${wall} ms of real time: $(awk -v f="$fetches" -v r="$repos" \
    -v n="$replicas" -v w="$wall" -v i="$interval" 'BEGIN { k = w / 1000 / i; if (k < 1) k = 1;
    printf "%.2f per repository per replica per %d s poll interval (%.1f intervals)", f / r / n / k, i, k }')"
  for pid in "${servers[@]}"; do
    echo "  replica pid $pid: peak RSS $(awk '/VmHWM/ {print $2}' "/proc/$pid/status") KiB, now $(awk '/VmRSS/ {print $2}' "/proc/$pid/status") KiB"
    # utime+stime of the server, and of its children that ended (the fetch workers).
    echo "  replica pid $pid: CPU $(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f s in the server, %.2f s in fetch workers", ($14 + $15) / hz, ($16 + $17) / hz }' "/proc/$pid/stat")"
    kill "$pid"
  done
  if [ -z "$first" ]; then
    first=$replicas
  elif cmp -s "$work/digest-$first" "$work/digest-$replicas"; then
    echo "  final objects: identical to the $first-replica run"
  else
    echo "  final objects: $(diff "$work/digest-$first" "$work/digest-$replicas" | grep -c '^>') differ from the $first-replica run"
  fi
done
