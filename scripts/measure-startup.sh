#!/usr/bin/env bash
# Measures, for the release binary: time from process start to /readyz 200, and the
# idle resident set size a few seconds later. Usage: scripts/measure-startup.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
cargo build --release --quiet
bin=target/release/metahooks
for _ in $(seq "$runs"); do
  hook=$((20000 + RANDOM % 20000)); probe=$((hook + 1))
  start=$(date +%s%N)
  "$bin" serve --listen "127.0.0.1:$hook" --probe-listen "127.0.0.1:$probe" --shutdown-delay-seconds 0 >/dev/null 2>&1 &
  pid=$!
  until curl -fs "http://127.0.0.1:$probe/readyz" >/dev/null 2>&1; do :; done
  ready=$(date +%s%N)
  sleep 2
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid" || true
  echo "ready_ms=$(( (ready - start) / 1000000 )) rss_kib=$rss"
done
