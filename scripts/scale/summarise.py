"""Summarises one `metahooks emulate -o json` report of the scale-out benchmark and
writes a digest of the final objects (for comparing runs with different replica counts).

usage: summarise.py REPORT.json DIGEST_OUT [SERVER_LOG...]

With the servers' JSON logs, warm answer times are also given as the servers measured
them (header read to answer built, from the access lines' duration_ms).
"""
import hashlib
import json
import sys

report = json.load(open(sys.argv[1]))
summary = report["summary"]
objects = report["objects"]
parents = [o for o in objects if o["kind"] in ("APIMock", "MonitoredService")]
converged = summary["roundsToConverge"]


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


warm = {}
calls = {}
called = {}
# The emulator names a call by its controller registration (monitoredservice-config-monitor),
# the server by its controller (monitoredservice): a server line is named after the
# registration of that controller that called that parent's hook (namespace/name alone
# could belong to parents of two kinds).
registration = {}
for entry in report["timeline"]:
    for call in entry["calls"]:
        name = f'{call["controller"]} {call["hook"]}'
        registration.setdefault((call["parent"], call["hook"]), set()).add(call["controller"])
        calls[name] = calls.get(name, 0) + 1
        called.setdefault(name, set()).add(call["parent"])
        if entry["round"] > converged:
            warm.setdefault(name, []).append(call["millis"])


def server_times(logs):
    """Durations the servers logged per hook, warm calls only. Calls arrive round by
    round, so the warm ones are the last of each replica's lines for that hook: as many
    as the share of warm calls in the emulator's timeline (exact with one replica, to a
    call or two per round with several called round-robin)."""
    logged = {}
    for log in logs:
        per_hook = {}
        for line in open(log, errors="replace"):
            if '"hook call' not in line and '"hook answer' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            parent = f'{record.get("parent.namespace")}/{record.get("parent.name")}'
            controller = record.get("controller") or ""
            callers = [r for r in registration.get((parent, record.get("hook")), ())
                       if r.startswith(controller)]
            if len(callers) != 1:
                continue
            name = f'{callers[0]} {record.get("hook")}'
            per_hook.setdefault(name, []).append(float(record["duration_ms"]))
        for name, times in per_hook.items():
            share = len(warm.get(name, [])) / max(1, calls.get(name, 0))
            logged.setdefault(name, []).extend(times[len(times) - round(len(times) * share):])
    return logged


served = server_times(sys.argv[3:])

print(f"  parents: {len(parents)}, objects at the end: {len(objects)}")
print(f"  rounds to converge: {converged}, rounds in all: {summary['rounds']}, simulated seconds: {summary['simulatedSeconds']}")
print(f"  hook calls: {report['hookCalls']} ({report['hookCalls'] / max(1, len(parents)):.1f} per parent)")
warm_rounds = summary["rounds"] - converged
for name, times in sorted(warm.items()):
    print(f"  warm {name}: {len(times)} calls, p50 {percentile(times, 0.5):.2f} ms, p99 {percentile(times, 0.99):.2f} ms (answer time seen by the emulator)")
    # A real-clock source poll landing among the warm rounds makes answers pending for a
    # while, so their parents are called back sooner and those answers are computed: runs
    # with such calls and runs without them have different tails, and this tells them apart.
    beyond = len(times) - len(called[name]) * warm_rounds
    if beyond > 0:
        print(f"  warm {name}: {beyond} calls beyond one per parent per warm round (parents called back sooner, as while a source poll is pending)")
    if name in served:
        own = served[name]
        print(f"  warm {name}: {len(own)} calls, p50 {percentile(own, 0.5):.3f} ms, p99 {percentile(own, 0.99):.3f} ms (as the servers measured it)")
print(f"  findings: {len(report['findings'])}")
for finding in report["findings"][:5]:
    print(f"    [{finding['rule']}] {finding['subject']}: {finding['message'][:160]}")


def canonical(obj):
    obj = json.loads(json.dumps(obj))
    obj.pop("status", None)
    meta = obj.get("metadata", {})
    for field in ("resourceVersion", "generation", "uid", "creationTimestamp", "ownerReferences", "deletionTimestamp"):
        meta.pop(field, None)
    annotations = meta.get("annotations", {})
    annotations.pop("metacontroller.k8s.io/last-applied-configuration", None)
    return json.dumps(obj, sort_keys=True)


with open(sys.argv[2], "w") as out:
    for line in sorted(hashlib.sha256(canonical(o).encode()).hexdigest() + " " + o["kind"] + " " + o["metadata"].get("namespace", "") + "/" + o["metadata"]["name"] for o in objects):
        out.write(line + "\n")
