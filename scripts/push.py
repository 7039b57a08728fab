#!/usr/bin/env python3
"""Push-to-roll latency and the cost of the receivers' resync bound, against a running
`metahooks serve --receiver-listen` (started by scripts/push.sh).

    push.py HOOKS_URL RECEIVER_URL SECRET REPO_URL WORK_TREE PARENTS SECONDS

1. Latency: one MonitoredService (interval 600 s) is synced as Metacontroller would:
   at once, then again after each answer's resyncAfterSeconds. A commit is pushed to the
   repository, the receiver is called, and the script reports the time from the receiver
   call to the answer whose Deployment carries the new config hash (the rollout).
2. Cost: PARENTS MonitoredServices reading the same repository are synced at the rate
   the bound asks for (PARENTS / resyncAfterSeconds per second) for SECONDS; the
   server's CPU time over that window (from /proc) is reported per second of wall time.
"""
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

hooks, receiver, secret, repo_url, work_tree, parents, seconds = sys.argv[1:8]
parents, seconds = int(parents), float(seconds)
hook = urllib.parse.urlparse(hooks)


def request(name, observed):
    parent = {
        "apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": name, "namespace": "team-a", "uid": "uid-" + name, "generation": 1},
        "spec": {"image": "web:1", "format": "env", "intervalSeconds": 600,
                 "source": {"git": {"url": repo_url, "ref": "main", "path": "app.env"}}},
    }
    return {"controller": {}, "parent": parent, "children": observed, "related": {}}


class Caller:
    def __init__(self):
        self.conn = http.client.HTTPConnection(hook.hostname, hook.port, timeout=30)

    def sync(self, body):
        self.conn.request("POST", "/monitoredservice/sync", body=json.dumps(body),
                          headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return json.loads(response.read())


def children_of(answer):
    observed = {}
    for child in answer.get("children", []):
        key = f"{child['kind']}.{child['apiVersion']}"
        observed.setdefault(key, {})[child["metadata"]["name"]] = child
    return observed


def config_hash(answer):
    for child in answer.get("children", []):
        if child["kind"] == "Deployment":
            return child["spec"]["template"]["metadata"]["annotations"].get(
                "monitoredservice.metahooks.io/config-hash")
    return None


def git(*args):
    subprocess.run(["git", *args], cwd=work_tree, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"})


def push_hook():
    body = json.dumps({"url": repo_url}).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    target = urllib.parse.urlparse(receiver)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    conn.request("POST", "/receivers/generic", body=body, headers={"X-Signature-256": signature})
    response = conn.getresponse()
    return response.status, response.read()


# 1. Latency, as Metacontroller would see it.
caller = Caller()
observed = {}
answer = caller.sync(request("web", observed))
deadline = time.time() + 60
while config_hash(answer) is None:  # the first fetch
    assert time.time() < deadline, answer
    time.sleep(float(answer.get("resyncAfterSeconds", 1)))
    answer = caller.sync(request("web", children_of(answer)))
before = config_hash(answer)
resync = float(answer.get("resyncAfterSeconds", 0))
print(f"resyncAfterSeconds with receivers: {resync:g} (interval 600)")
time.sleep(3)  # an idle remote: past the 2 s push spacing of its last fetch
with open(os.path.join(work_tree, "app.env"), "w") as f:
    f.write(f"COLOUR=green-{time.time()}\n")
git("commit", "-qam", "push")
git("push", "-q", "origin", "HEAD:main")
pushed = time.time()
status, body = push_hook()
assert status == 202, (status, body)
# Metacontroller's next sync comes at the resync the last answer asked for: model it as
# landing anywhere in that window by syncing at the end of it (the worst case).
next_sync = pushed + resync
fetched_at = None
while True:
    time.sleep(max(0.0, next_sync - time.time()))
    answer = caller.sync(request("web", children_of(answer)))
    if config_hash(answer) != before:
        break
    assert time.time() - pushed < 60, "never rolled"
    next_sync = time.time() + float(answer.get("resyncAfterSeconds", resync))
print(f"receiver call -> rolled Deployment: {time.time() - pushed:.2f} s (worst case: the sync lands at the end of its resync window)")

# 2. Cost of the bound at PARENTS parents.
names = [f"svc-{i}" for i in range(parents)]
threads, stop = 8, time.time() + seconds
rate = parents / max(resync, 1.0)
bodies = {}
warm = Caller()
for name in names:  # converge each once so the load is warm resyncs
    a = warm.sync(request(name, {}))
    for _ in range(50):
        if config_hash(a):
            break
        time.sleep(0.1)
        a = warm.sync(request(name, children_of(a)))
    bodies[name] = json.dumps(request(name, children_of(a)))


def server_cpu():
    pid = subprocess.run(["pgrep", "-f", "metahooks serve"], capture_output=True, text=True).stdout.split()[0]
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


done = [0]
lock = threading.Lock()


def load(index):
    c = Caller()
    mine = names[index::threads]
    interval = threads / rate
    next_at = time.time()
    i = 0
    while time.time() < stop:
        name = mine[i % len(mine)]
        c.conn.request("POST", "/monitoredservice/sync", body=bodies[name],
                       headers={"Content-Type": "application/json"})
        c.conn.getresponse().read()
        with lock:
            done[0] += 1
        i += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.time()))


cpu0, t0 = server_cpu(), time.time()
workers = [threading.Thread(target=load, args=(i,)) for i in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
cpu1, t1 = server_cpu(), time.time()
print(f"{parents} parents at one sync per {resync:g} s: {done[0] / (t1 - t0):.0f} syncs/s "
      f"({60 / resync:.0f} per parent per minute), server CPU {100 * (cpu1 - cpu0) / (t1 - t0):.1f}% of one core")
