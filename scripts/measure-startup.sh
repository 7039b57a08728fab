#!/usr/bin/env bash
# Measures, for the release binary: time from process start to /readyz 200, and the
# idle resident set size two seconds later. Usage: scripts/measure-startup.sh [RUNS]
# The probe is polled from one Python process every half millisecond: a curl per poll
# would cost ~10 ms each and hide the figure being measured.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
cargo build --release --quiet
python3 - "${CARGO_TARGET_DIR:-target}/release/metahooks" "$runs" <<'PY'
import socket, subprocess, sys, time

binary, runs = sys.argv[1], int(sys.argv[2])

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def ready(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            return b" 200 " in s.recv(64)
    except OSError:
        return False

for _ in range(runs):
    hook, probe = free_port(), free_port()
    started = time.monotonic()
    server = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{hook}", "--probe-listen", f"127.0.0.1:{probe}",
         "--shutdown-delay-seconds", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready(probe):
        if time.monotonic() - started > 30:
            sys.exit("the server did not become ready within 30 s")
        time.sleep(0.0005)
    ready_ms = (time.monotonic() - started) * 1000
    time.sleep(2)
    with open(f"/proc/{server.pid}/status") as status:
        rss = next(line.split()[1] for line in status if line.startswith("VmRSS"))
    server.terminate()
    server.wait()
    print(f"ready_ms={ready_ms:.1f} rss_kib={rss}")
PY
