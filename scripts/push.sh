#!/usr/bin/env bash
# Push receivers measured end to end: a loopback `git daemon`, `metahooks serve` with
# --receiver-listen, and scripts/push.py playing Metacontroller (it syncs at the resync
# each answer asks for) and the forge (a signed generic push).
#
#   scripts/push.sh [PARENTS] [SECONDS]      defaults: 2000 30
#
# Prints resyncAfterSeconds while receivers listen, the time from the receiver call to
# the answer that rolls the Deployment, and the server's CPU while PARENTS parents are
# synced at the rate the resync bound asks for. Needs git, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
parents="${1:-2000}"; seconds="${2:-30}"
cargo build --release --quiet --bin metahooks
bin="${CARGO_TARGET_DIR:-target}/release/metahooks"
. scripts/lib/background.sh

git init -q --bare --initial-branch=main "$work/repo.git"
git init -q --initial-branch=main "$work/tree"
git -C "$work/tree" remote add origin "$work/repo.git"
echo "COLOUR=blue" > "$work/tree/app.env"
git -C "$work/tree" add app.env
GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@x GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@x \
  git -C "$work/tree" commit -qm first
git -C "$work/tree" push -q origin HEAD:main
git_port=$(port)
git daemon --export-all --reuseaddr --listen=127.0.0.1 --port="$git_port" \
  --base-path="$work" "$work" 2>/dev/null &
pids+=($!)
hook_port=$(port); probe_port=$(port); receiver_port=$(port)
echo -n "push-measure-secret" > "$work/secret"
"$bin" serve --listen "127.0.0.1:$hook_port" --probe-listen "127.0.0.1:$probe_port" \
  --receiver-listen "127.0.0.1:$receiver_port" --receiver-secret-file "$work/secret" \
  --allow-scheme git --allow-private-addresses --cache-dir "$work/cache" \
  --log-format text > "$work/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$probe_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
python3 scripts/push.py "http://127.0.0.1:$hook_port" "http://127.0.0.1:$receiver_port" \
  push-measure-secret "git://127.0.0.1:$git_port/repo.git" "$work/tree" "$parents" "$seconds"
