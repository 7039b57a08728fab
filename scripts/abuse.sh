#!/usr/bin/env bash
# Measures what hostile input costs a release build (peak RSS, time, leftover CPU), one
# fresh server per attack, loopback only. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
# ABUSE_ONLY=sources scripts/abuse.sh: only the attacks on the source engine;
# ABUSE_ONLY=bounds: only the bounds attacks (probe port, trickled bodies, long URLs,
# path spellings, a future-dated commit, receiver slots); ABUSE_ONLY=squatting: idle
# connections on every port (HTTP/2 over TLS too), rapid reset, origins that send without
# end, one client holding the body budget.
python3 scripts/abuse.py target/release/metahooks
