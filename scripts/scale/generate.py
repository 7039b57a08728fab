"""Writes the scale-out benchmark's objects: APIMocks (a handful of distinct small
definitions, as teams copy each other's) and MonitoredServices spread over git
repositories served by a loopback git daemon.

usage: generate.py OUT_DIR APIMOCKS MONITORED REPOS GIT_BASE_URL
"""
import json
import sys

out, apimocks, monitored, repos, git_base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

DEFINITION = """openapi: 3.0.3
info: {{title: Team {team} API, version: '1.{team}'}}
paths:
  /items/{{id}}:
    get:
      operationId: getItem
      parameters:
        - {{name: id, in: path, required: true, schema: {{type: integer}}}}
      responses:
        '200':
          description: one item
          content:
            application/json:
              example: {{id: 1, name: item}}
"""

def write_list(path, items):
    # JSON is YAML; one List per file keeps the files quick to read.
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)

namespaces = 50
write_list(f"{out}/apimocks.json", [
    {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
     "metadata": {"name": f"mock-{i}", "namespace": f"team-{i % namespaces}"},
     "spec": {"definition": DEFINITION.format(team=i % 10)}}
    for i in range(apimocks)
])
write_list(f"{out}/monitored.json", [
    {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
     "metadata": {"name": f"svc-{i}", "namespace": f"team-{i % namespaces}"},
     "spec": {"image": "registry.example/app:1", "intervalSeconds": 10,
              "source": {"git": {"url": f"{git_base}/repo-{i % repos}", "path": "app.env"}}}}
    for i in range(monitored)
])
