#!/usr/bin/env bash
# Posts every golden case to a running metahooks and compares the answer with the stored
# response (as JSON values). Usage: hooks-tests/run.sh [BASE_URL]   (default http://localhost:8080)
#
# A case's hook is `customize` when its request has no observed map (children or
# attachments), `finalize` when it has "finalizing": true, else `sync`.
# Conditions stamped with the recording time (2026-01-01T00:00:00Z) appeared or flipped in
# that answer and carry the server's current time instead, so that one field is not compared.
set -uo pipefail
base="${1:-http://localhost:8080}"
while [ "${base%/}" != "$base" ]; do base="${base%/}"; done   # http://host:8080/ works too
here="$(cd "$(dirname "$0")" && pwd)"
passed=0
failed=0
for request in "$here"/*/*/request.json; do
  case_dir="$(dirname "$request")"
  controller="$(basename "$(dirname "$case_dir")")"
  hook="$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("customize" if "children" not in r and "attachments" not in r else "finalize" if r.get("finalizing") is True else "sync")' "$request")"
  answer="$(mktemp)"
  code="$(curl -sS -o "$answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary @"$request" "$base/$controller/$hook" 2>&1)"
  if python3 - "$case_dir/response.json" "$answer" "$code" "$base/$controller/$hook" <<'PY'
import json, sys
RECORDED = "2026-01-01T00:00:00Z"
expected = json.load(open(sys.argv[1]))
text = open(sys.argv[2], encoding="utf-8", errors="replace").read()
if sys.argv[3] != "200":
    print(f"    POST {sys.argv[4]} answered {sys.argv[3]}: {text}"); sys.exit(1)
try:
    actual = json.loads(text)
except ValueError:
    print("    answer is not JSON: " + text); sys.exit(1)
def relax(exp, act):
    for e, a in zip((exp.get("status") or {}).get("conditions") or [], (act.get("status") or {}).get("conditions") or []):
        if e.get("lastTransitionTime") == RECORDED:
            e.pop("lastTransitionTime", None); a.pop("lastTransitionTime", None)
if isinstance(actual, dict):
    relax(expected, actual)
if expected != actual:
    e = json.dumps(expected, sort_keys=True, indent=1).splitlines()
    a = json.dumps(actual, sort_keys=True, indent=1).splitlines()
    import difflib
    for line in difflib.unified_diff(e, a, "expected", "actual", lineterm=""):
        print("    " + line)
    sys.exit(1)
PY
  then
    rm -f "$answer"
    passed=$((passed + 1))
    echo "ok   $controller/$(basename "$case_dir") ($hook)"
  else
    rm -f "$answer"
    failed=$((failed + 1))
    echo "FAIL $controller/$(basename "$case_dir") ($hook)"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
