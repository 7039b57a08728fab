#!/usr/bin/env python3
"""Renders a Helm chart offline with the pinned helm-python-sdk (Helm's own Go library
behind a C ABI, no cluster, no network) after `helm lint --strict`, and prints the objects
as one YAML stream: the CRDs of crds/ first, then the templates in path order.

usage: render_chart.py CHART_DIR RELEASE NAMESPACE [VALUES.yaml]
A lint error or a render failure exits 1 with Helm's message."""
import os
import sys

import yaml
from helm_python import chart as helm_chart


def main():
    chart_dir, release, namespace = sys.argv[1:4]
    values = {}
    if len(sys.argv) > 4:
        with open(sys.argv[4], encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    report = helm_chart.lint(chart_dir, values, strict=True, namespace=namespace)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    if problems or report.get("errors"):
        for m in problems:
            print(f"helm lint: {m.get('path')}: {m.get('error')}", file=sys.stderr)
        for e in report.get("errors") or []:
            print(f"helm lint: {e}", file=sys.stderr)
        sys.exit(1)
    out = []
    crds = os.path.join(chart_dir, "crds")
    for name in sorted(os.listdir(crds)) if os.path.isdir(crds) else []:
        with open(os.path.join(crds, name), encoding="utf-8") as f:
            out.append(f.read())
    with helm_chart.Chart.load(chart_dir) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    for path in sorted(rendered):
        if path.endswith(".yaml") and rendered[path].strip():
            out.append(rendered[path])
    for text in out:
        for doc in yaml.safe_load_all(text):
            if doc:
                print("---")
                print(yaml.safe_dump(doc, sort_keys=False), end="")


if __name__ == "__main__":
    main()
