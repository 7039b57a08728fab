#!/usr/bin/env python3
"""Attacks a release build of metahooks on loopback and reports what each attack cost:
peak RSS of the server (VmHWM), wall time, HTTP outcome, and CPU still being burnt after
the last answer. A fresh server per attack, so every peak is that attack's own.

usage: scripts/abuse.py BINARY   (scripts/abuse.sh builds the binary and calls this)
Nothing leaves 127.0.0.1; every loop is bounded in count and time.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BINARY = sys.argv[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags):
        self.hook, self.probe = free_port(), free_port()
        self.cache = tempfile.mkdtemp(prefix="metahooks-abuse-")
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--listen", f"127.0.0.1:{self.hook}", "--probe-listen",
             f"127.0.0.1:{self.probe}", "--cache-dir", self.cache, "--shutdown-delay-seconds", "1",
             *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if get(self.probe, "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise SystemExit("server did not become ready")

    def status(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def peak_mib(self):
        return self.status("VmHWM") / 1024

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def threads(self):
        return self.status("Threads")

    def leftover_cpu(self, seconds=2.0):
        """CPU seconds the server burns in `seconds` after the attack's last answer."""
        before = self.cpu_seconds()
        time.sleep(seconds)
        return self.cpu_seconds() - before

    def stop(self):
        started = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        return time.time() - started


def get(port, path, timeout=5):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body


def post(port, path, body, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def apimock_request(definition, name="bomb"):
    return json.dumps({
        "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                   "metadata": {"name": name, "namespace": "team-a", "uid": "u", "generation": 1},
                   "spec": {"definition": definition}},
        "children": {}, "related": {}, "finalizing": False}).encode()


def validated(data):
    try:
        status = json.loads(data)["status"]
    except (ValueError, KeyError):
        return "-"
    for c in status.get("conditions", []):
        if c.get("type") == "Validated":
            return f"Validated={c['status']} {c['reason']}"
    return "-"


ROWS = []


def report(attack, server, started, outcome):
    elapsed = time.time() - started
    leftover = server.leftover_cpu()
    ROWS.append((attack, f"{server.peak_mib():.0f}", f"{elapsed:.2f}", outcome, f"{leftover:.2f}", str(server.threads())))


def nested_alias_bomb(levels, fan_out, pad=0):
    head = "openapi: 3.0.0\ninfo: {title: t, version: '1', description: '" + "d" * pad + "'}\npaths: {}\n"
    text = head + "x-l0: &l0 [" + ", ".join(["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"] * fan_out) + "]\n"
    for level in range(1, levels):
        text += f"x-l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * fan_out) + "]\n"
    return text


def flat_alias_bomb(size):
    head = "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n"
    anchor = "x-a: &a [" + ", ".join(["b" * 64] * 200) + "]\n"
    refs = "x-r: [" + ", ".join(["*a"] * ((size - len(head) - len(anchor)) // 4)) + "]\n"
    return head + anchor + refs


def attack_definition(name, definition):
    server = Server()
    started = time.time()
    code, data = post(server.hook, "/apimock/sync", apimock_request(definition))
    report(f"{name} ({len(definition) // 1024} KiB)", server, started, f"{code} {validated(data)}")
    server.stop()


def attack_saturation():
    """Changed 900 KB definitions from 8 clients while probes are timed."""
    server = Server("--max-in-flight", "4")
    big = "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n" + "".join(
        f"  /p{i}:\n    get:\n      responses:\n        '200': {{description: ok}}\n" for i in range(11000))
    stop = time.time() + 15
    codes = {}
    lock = threading.Lock()

    def client(n):
        i = 0
        while time.time() < stop:
            i += 1
            try:
                code, _ = post(server.hook, "/apimock/sync", apimock_request(big + f"x-n: {n}-{i}\n"))
            except OSError:
                code = "error"
            with lock:
                codes[code] = codes.get(code, 0) + 1

    started = time.time()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    latencies = []
    while time.time() < stop:
        t0 = time.time()
        get(server.probe, "/healthz")
        latencies.append(time.time() - t0)
        time.sleep(0.01)
    for t in threads:
        t.join()
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    report(f"saturation: 8 clients x changed {len(big) // 1024} KiB definitions, --max-in-flight 4",
           server, started, f"answers {codes}; /healthz p99 {p99:.1f} ms over {len(latencies)} probes")
    server.stop()


def upload(port, body, timeout=60):
    """POSTs `body`, watching for an answer while sending: a server that refuses the call
    before reading the body answers (and closes) mid-upload. Returns (status, sent bytes)."""
    import select
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"POST /apimock/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    sent = 0
    try:
        while sent < len(body):
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                break
            sent += s.send(body[sent:sent + 1024 * 1024])
    except OSError:
        pass
    try:
        status = s.recv(64).split(b" ")[1].decode()
    except (OSError, IndexError):
        status = "closed"
    s.close()
    return status, sent


def attack_uploads():
    """50 concurrent 30 MB uploads with --max-in-flight 4."""
    server = Server("--max-in-flight", "4")
    body = b'{"parent": {"metadata": {"name": "x"}}, "pad": "' + b"x" * (30 * 1024 * 1024) + b'"}'
    codes = {}
    unread = []
    lock = threading.Lock()

    def one():
        code, sent = upload(server.hook, body)
        with lock:
            codes[code] = codes.get(code, 0) + 1
            if code == "429":
                unread.append(len(body) - sent)

    started = time.time()
    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = f"; the 429s came with on average {sum(unread) // max(1, len(unread)) // (1024 * 1024)} MiB of their body unsent" if unread else ""
    report("50 concurrent 30 MB uploads, --max-in-flight 4", server, started, f"answers {codes}{left}")
    server.stop()


def attack_slow_clients():
    """1000 connections that never finish their headers, and 20 that trickle a body."""
    server = Server("--header-read-timeout-seconds", "2", "--body-read-timeout-seconds", "2",
                    "--max-connections", "500")
    started = time.time()
    sockets = []
    for _ in range(1000):
        s = socket.create_connection(("127.0.0.1", server.hook))
        s.sendall(b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\n")
        sockets.append(s)
    tricklers = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", server.hook))
        s.sendall(b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\ncontent-length: 1000\r\n\r\n{")
        tricklers.append(s)
    closed = 0
    deadline = time.time() + 60
    for s in sockets + tricklers:
        s.settimeout(max(0.1, deadline - time.time()))
        try:
            while s.recv(4096):
                pass
            closed += 1
        except ConnectionResetError:
            closed += 1  # closed by the server, with our unread bytes still queued
        except OSError:
            pass  # still open when the time ran out
        s.close()
    ok = get(server.probe, "/healthz")[0]
    report("1000 stalled headers + 20 trickled bodies", server, started,
           f"{closed}/1020 closed by the server; /healthz {ok}")
    server.stop()


def attack_tree_bomb():
    """A git repository of trees naming each other (6 levels x 100), over git daemon."""
    root = tempfile.mkdtemp(prefix="metahooks-bomb-")
    bare = os.path.join(root, "bomb.git")
    subprocess.run(["git", "init", "-q", "--bare", bare], check=True)

    def git(args, data=b""):
        return subprocess.run(["git", *args], cwd=bare, input=data, capture_output=True,
                              check=True, env={**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
                                               "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}).stdout.decode().strip()

    tree = git(["mktree"])
    for _ in range(6):
        tree = git(["mktree"], "".join(f"040000 tree {tree}\td{i}\n" for i in range(100)).encode())
    commit = git(["commit-tree", tree, "-m", "bomb"])
    git(["update-ref", "refs/heads/main", commit])
    git(["symbolic-ref", "HEAD", "refs/heads/main"])
    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={root}",
                               "--listen=127.0.0.1", f"--port={port}", root],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    server = Server("--allow-scheme", "git", "--allow-private-addresses")
    request = json.dumps({
        "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
                   "metadata": {"name": "svc", "namespace": "team-a", "uid": "u", "generation": 1},
                   "spec": {"image": "app:1", "source": {"git": {"url": f"git://127.0.0.1:{port}/bomb.git"}}}},
        "children": {}, "related": {}, "finalizing": False}).encode()
    started = time.time()
    outcome = "no answer"
    while time.time() - started < 60:
        code, data = post(server.hook, "/monitoredservice/sync", request)
        fetched = [c for c in json.loads(data)["status"].get("conditions", []) if c["type"] == "Fetched"]
        if fetched and fetched[0]["reason"] not in ("FetchPending",):
            outcome = f"{code} Fetched={fetched[0]['status']} {fetched[0]['reason']}"
            break
        time.sleep(0.1)
    report("git tree bomb, 6 levels x 100 entries", server, started, outcome)
    took = server.stop()
    ROWS.append(("  SIGTERM to exit after the tree bomb", "", f"{took:.2f}" if took else "killed", "", "", ""))
    daemon.terminate()


def main():
    attack_definition("YAML nested alias bomb (anchors of anchors, 100^6 nodes)", nested_alias_bomb(6, 100, pad=32 * 1024))
    attack_definition("YAML flat alias bomb", flat_alias_bomb(200 * 1024))
    attack_definition("$ref cycle", "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n  /a:\n    get:\n      parameters: [{$ref: '#/components/parameters/P0'}]\n      responses: {'200': {description: ok}}\ncomponents:\n  parameters:\n    P0: {$ref: '#/components/parameters/P0'}\n")
    big = "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n" + "".join(
        f"  /p{i}:\n    get:\n      responses:\n        '200': {{description: ok}}\n" for i in range(11000))
    attack_definition("one valid definition near the size limit", big)
    attack_saturation()
    attack_uploads()
    attack_slow_clients()
    attack_tree_bomb()
    header = ("attack", "peak RSS MiB", "seconds", "outcome", "CPU s in 2 s after", "threads")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in ROWS:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
