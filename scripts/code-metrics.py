#!/usr/bin/env python3
"""Size of the code as a reader meets it: function lengths, long files, unit tests.

Usage: scripts/code-metrics.py [DIR...]   (default: src and every crates/*/src)
       scripts/code-metrics.py --series A..B [DIR]   (default DIR: src)

For an earlier commit: git archive REV src | tar -x -C /tmp/then && scripts/code-metrics.py /tmp/then/src
`--series` prints DIR's non-test lines at A and after each commit up to B, with each
commit's change: what a change of many commits added or took away, commit by commit.

Counts non-test code only: `#[cfg(test)]` modules (inline, or a `mod x;` whose file is
then skipped) are left out. A function's length is the lines from its `fn` line to its
closing brace. The scanner knows Rust's strings, raw strings, chars and comments well
enough for brace matching; it is a measuring tape, not a parser.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")
TEST_ATTR = re.compile(r"#\[(?:tokio::)?test(?:\(.*?\))?\]")


def code_mask(text):
    """For each character: True when it is code (not string, char or comment)."""
    mask = [True] * len(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                mask[k] = False
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r'r(#*)"', text[i:i + 20]).group(1))
            end = text.find('"' + "#" * hashes, i + 2 + hashes)
            end = n if end < 0 else end + 1 + hashes
            for k in range(i, end):
                mask[k] = False
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            for k in range(i, min(j + 1, n)):
                mask[k] = False
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12])
            for k in range(i, i + len(m.group(0))):
                mask[k] = False
            i += len(m.group(0))
        else:
            i += 1
    return mask


def matching_brace(text, mask, start):
    depth = 0
    for k in range(start, len(text)):
        if not mask[k]:
            continue
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def strip_tests(text):
    """The text without inline test modules, and the names of test modules in files."""
    mask = code_mask(text)
    skipped_files = []
    out, pos = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < pos or not mask[m.start()]:
            continue
        if m.group(2) == ";":
            skipped_files.append(m.group(1))
            continue
        end = matching_brace(text, mask, m.end() - 1)
        out.append(text[pos:m.start()])
        # keep the line count, drop the content
        out.append("\n" * text[m.start():end + 1].count("\n"))
        pos = end + 1
    out.append(text[pos:])
    return "".join(out), skipped_files


def functions(path, text):
    mask = code_mask(text)
    lines = text.split("\n")
    offsets, total = [], 0
    for line in lines:
        offsets.append(total)
        total += len(line) + 1
    found = []
    for number, line in enumerate(lines):
        m = FN.match(line)
        if not m or not mask[offsets[number] + line.index("fn")]:
            continue
        # the body starts at the first code `{` before a code `;`
        k = offsets[number] + m.end()
        while k < len(text) and not (mask[k] and text[k] in "{;"):
            k += 1
        if k >= len(text) or text[k] == ";":
            continue
        end = matching_brace(text, mask, k)
        length = text.count("\n", offsets[number], end) + 1
        found.append((length, f"{path}:{number + 1} {m.group(1)}"))
    return found


def default_roots():
    crates = sorted(os.listdir("crates")) if os.path.isdir("crates") else []
    return ["src"] + [os.path.join("crates", name, "src") for name in crates]


def read_sources(roots):
    """Every .rs file under `roots` with its text, and the files that are test modules."""
    paths = []
    for root in roots:
        for directory, _, files in os.walk(root):
            for name in files:
                if name.endswith(".rs"):
                    paths.append(os.path.join(directory, name))
    paths.sort()
    texts = {p: open(p, encoding="utf-8").read() for p in paths}
    skip = set()
    for path, text in texts.items():
        _, test_files = strip_tests(text)
        folder = os.path.dirname(path)
        stem = os.path.splitext(path)[0]
        for module in test_files:
            for candidate in (os.path.join(folder, module + ".rs"), os.path.join(stem, module + ".rs")):
                skip.add(candidate)
    return texts, skip


def line_counts(code):
    """Non-blank lines of `code`, and how many of them hold only a comment."""
    mask, offset, lines, comments = code_mask(code), 0, 0, 0
    for line in code.split("\n"):
        stripped = line.strip()
        if stripped:
            lines += 1
            if not any(mask[offset + k] for k, c in enumerate(line) if not c.isspace()):
                comments += 1
        offset += len(line) + 1
    return lines, comments


def series(revisions, root):
    """Non-test lines of `root` after each commit of `revisions` (A..B), with the change."""
    commits = subprocess.run(["git", "rev-list", "--reverse", revisions], check=True,
                             capture_output=True, text=True).stdout.split()
    base = revisions.split("..")[0]
    previous = None
    for commit in [base] + commits:
        with tempfile.TemporaryDirectory() as tree:
            archive = subprocess.run(["git", "archive", commit, root], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
            texts, skip = read_sources([os.path.join(tree, root)])
            total = sum(line_counts(strip_tests(text)[0])[0] for path, text in texts.items() if path not in skip)
        subject = subprocess.run(["git", "log", "-1", "--format=%h %s", commit], check=True,
                                 capture_output=True, text=True).stdout.strip()
        change = "" if previous is None else f"{total - previous:+6d}"
        print(f"{change:>6} {total:6d}  {subject[:110]}")
        previous = total


def main():
    if sys.argv[1:2] == ["--series"]:
        if len(sys.argv) not in (3, 4) or ".." not in sys.argv[2]:
            sys.exit("usage: scripts/code-metrics.py --series A..B [DIR]")
        series(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "src")
        return
    roots = sys.argv[1:] or default_roots()
    all_fns, long_files, tests = [], [], {}
    sizes = {root: [0, 0] for root in roots}  # non-blank non-test lines, of them comment-only
    texts, skip = read_sources(roots)
    for path, text in texts.items():
        count = len(TEST_ATTR.findall(text))
        if count:
            module = os.path.splitext(path)[0]
            if path in skip:
                module = os.path.dirname(module) + " (" + os.path.basename(module) + ")"
            tests[module] = tests.get(module, 0) + count
        if path in skip:
            continue
        code, _ = strip_tests(text)
        code_lines, comments = line_counts(code)
        root = next(r for r in roots if path.startswith(os.path.join(r, "")) or path == r)
        sizes[root][0] += code_lines
        sizes[root][1] += comments
        if code_lines > 400:
            long_files.append((code_lines, path))
        all_fns.extend(functions(path, code))
    for root, (lines, comments) in sizes.items():
        print(f"non-test lines in {root}: {lines} ({lines - comments} code, {comments} comment-only)")
    lengths = sorted(length for length, _ in all_fns)
    p90 = lengths[int(0.9 * (len(lengths) - 1))]
    print(f"functions (non-test): {len(lengths)}, median {statistics.median(lengths):g} lines, 90th percentile {p90}")
    print("longest:")
    for length, where in sorted(all_fns, reverse=True)[:5]:
        print(f"  {length:4d}  {where}")
    over = sorted((f for f in all_fns if f[0] > 60), reverse=True)
    print(f"functions over 60 lines: {len(over)}")
    for length, where in over[5:]:
        print(f"  {length:4d}  {where}")
    print(f"files over 500 non-blank, non-test lines: {sum(1 for n, _ in long_files if n > 500)}")
    print("files over 400 non-blank, non-test lines:")
    for lines, path in sorted(long_files, reverse=True):
        print(f"  {lines:4d}  {path}")
    if not long_files:
        print("  none")
    print(f"unit tests in {', '.join(roots)}: {sum(tests.values())}")
    for module, count in sorted(tests.items()):
        print(f"  {count:4d}  {module}")


if __name__ == "__main__":
    main()
