"""Summarises one `metahooks emulate -o json` report of the scale-out benchmark and
writes a digest of the final objects (for comparing runs with different replica counts).

usage: summarise.py REPORT.json DIGEST_OUT
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
for entry in report["timeline"]:
    if entry["round"] <= converged:
        continue
    for call in entry["calls"]:
        warm.setdefault(f'{call["controller"]} {call["hook"]}', []).append(call["millis"])

print(f"  parents: {len(parents)}, objects at the end: {len(objects)}")
print(f"  rounds to converge: {converged}, rounds in all: {summary['rounds']}, simulated seconds: {summary['simulatedSeconds']}")
print(f"  hook calls: {report['hookCalls']} ({report['hookCalls'] / max(1, len(parents)):.1f} per parent)")
for name, times in sorted(warm.items()):
    print(f"  warm {name}: {len(times)} calls, p50 {percentile(times, 0.5):.2f} ms, p99 {percentile(times, 0.99):.2f} ms (answer time seen by the emulator)")
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
