# Sourced by scripts that start servers in the background (load.sh, scale.sh): a work
# directory, the started processes killed and the directory removed on exit, and a
# free loopback port.
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
