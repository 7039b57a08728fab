# Sourced by scripts that start servers in the background (load.sh, scale.sh, push.sh,
# instructions.sh): a work directory, the started processes killed and the directory
# removed on exit, a free loopback port, and a wait until a server answers.
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_http URL [SECONDS] — poll until URL answers at all (any status); 30 s by default.
wait_http() {
  local tries=$(( ${2:-30} * 10 ))
  for _ in $(seq "$tries"); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "$(basename "$0"): $1 never answered" >&2; exit 1
}
