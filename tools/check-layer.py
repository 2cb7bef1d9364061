#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The kernel crate's layer rules (Documentation/design.rst, "Where unsafe
lives"), checked on its sources:

  1. outside drivers/ferroce/rdma/ (and the engine, transport/): no `unsafe`,
     no `extern "C"`, no raw pointer type;
  2. rdma/ never imports the driver's modules (driver, state, rings, quota,
     device): no import cycle;
  3. in rdma/: every `unsafe` block or `unsafe impl` has a `// SAFETY:`
     comment right above it (or on its line), no `unsafe` block is longer
     than 15 lines, every `unsafe fn` has a `# Safety` section in its doc,
     and a file that documents `# Invariants` says `// INVARIANT:` where it
     establishes them.

Usage: tools/check-layer.py [DIR]   (DIR: drivers/ferroce by default)
       tools/check-layer.py --self-test   (each rule catches its violation)
Prints each violation as FILE:LINE: what; exits 1 if there is any.
"""

import os
import re
import sys

MAX_BLOCK = 15
DRIVER_MODULES = ("driver", "state", "rings", "quota", "device")


def code_of(line):
    """The line without its // comment and string literals (roughly)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def sources(root):
    for d, _, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel.split(os.sep)[0] == "transport":
            continue
        for f in sorted(files):
            if f.endswith(".rs") and f != "bindings_generated.rs":
                yield os.path.join(d, f), rel.split(os.sep)[0] == "rdma"


def safety_above(lines, i):
    """Whether a // SAFETY: comment is on line i or in the comment lines
    (and attribute or `let`-continuation lines) right above it."""
    if "SAFETY:" in lines[i]:
        return True
    # `let x =` on the line above, `unsafe { .. }` continuing it.
    if i > 0 and lines[i].strip().startswith("unsafe") and code_of(lines[i - 1]).rstrip().endswith(("=", "(")):
        i -= 1
    j = i - 1
    while j >= 0:
        s = lines[j].strip()
        if s.startswith("//"):
            if "SAFETY:" in s:
                return True
            j -= 1
            continue
        if s.startswith("#[") or s == "":
            j -= 1 if s.startswith("#[") else 0
            if s == "":
                return False
            continue
        return False
    return False


def block_len(lines, i, col):
    """Lines from the `unsafe {` at (i, col) to its closing brace."""
    depth = 0
    started = False
    for k in range(i, len(lines)):
        text = code_of(lines[k])
        start = col if k == i else 0
        for ch in text[start:]:
            if ch == "{":
                depth += 1
                started = True
            elif ch == "}":
                depth -= 1
                if started and depth == 0:
                    return k - i + 1
    return len(lines) - i


def check_file(path, in_rdma, errors):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    code = [code_of(l) for l in lines]
    if not in_rdma:
        for n, c in enumerate(code, 1):
            if re.search(r"\bunsafe\b", c) and "unsafe_code" not in c:
                errors.append(f"{path}:{n}: `unsafe` outside rdma/")
            if 'extern "C"' in lines[n - 1] and not lines[n - 1].strip().startswith("//"):
                errors.append(f'{path}:{n}: extern "C" outside rdma/')
            if re.search(r"\*(mut|const)\s", c):
                errors.append(f"{path}:{n}: raw pointer type outside rdma/")
        return
    for n, c in enumerate(code, 1):
        m = re.match(r"\s*use\s+crate::(\w+)", c)
        if m and m.group(1) in DRIVER_MODULES:
            errors.append(f"{path}:{n}: rdma/ imports crate::{m.group(1)} (the layer never imports the driver)")
        for m in re.finditer(r"crate::(\w+)::", c):
            if m.group(1) in DRIVER_MODULES:
                errors.append(f"{path}:{n}: rdma/ names crate::{m.group(1)} (the layer never imports the driver)")
    invariants_doc = any(re.match(r"\s*///\s*# Invariants", l) for l in lines)
    if invariants_doc and not any("INVARIANT:" in l for l in lines):
        errors.append(f"{path}: documents `# Invariants` but never says `// INVARIANT:`")
    for i, c in enumerate(code):
        for m in re.finditer(r"\bunsafe\s*\{", c):
            if not safety_above(lines, i):
                errors.append(f"{path}:{i + 1}: unsafe block without a // SAFETY: comment")
            ln = block_len(lines, i, m.start())
            if ln > MAX_BLOCK:
                errors.append(f"{path}:{i + 1}: unsafe block of {ln} lines (at most {MAX_BLOCK})")
        if re.search(r"\bunsafe\s+impl\b", c) and not safety_above(lines, i):
            errors.append(f"{path}:{i + 1}: unsafe impl without a // SAFETY: comment")
        if re.search(r"\bunsafe\s+(extern\s+\"C\"\s+)?fn\b", lines[i].split("//")[0]):
            # The doc comment above (attributes and blank doc lines allowed).
            j = i - 1
            doc = []
            while j >= 0 and (lines[j].strip().startswith("///") or lines[j].strip().startswith("#[")):
                doc.append(lines[j])
                j -= 1
            if not any("# Safety" in d for d in doc):
                # A trait's implementation inherits the trait's contract.
                if not re.match(r"\s+unsafe fn", lines[i]) or not impl_of_trait(lines, i):
                    errors.append(f"{path}:{i + 1}: unsafe fn without a `# Safety` section")


def impl_of_trait(lines, i):
    """Whether line i is inside an `impl Trait for Type` block (the nearest
    enclosing impl line above it)."""
    for j in range(i - 1, -1, -1):
        s = code_of(lines[j])
        if re.match(r"\s*(unsafe\s+)?impl\b", s):
            return " for " in s
        if re.match(r"(pub(\(\w+\))?\s+)?(struct|fn|trait|mod)\b", s):
            return False
    return False


SELF_TEST = {
    "driver/a.rs": "fn f() { let p: *mut u8 = core::ptr::null_mut(); unsafe { g() } }\n"
    'unsafe extern "C" fn cb() {}\n',
    "rdma/b.rs": "use crate::state::X;\nfn f() {\n    unsafe {\n" + "x();\n" * 15 + "    }\n}\n"
    "unsafe fn h() {}\n// SAFETY: fine.\nunsafe impl Send for X {}\nunsafe impl Sync for X {}\n"
    "/// # Invariants\nstruct Y;\n"
    'unsafe extern "C" fn cb2() {}\n',
}
# What the fixture must produce, one per rule.
SELF_TEST_EXPECT = [
    "driver/a.rs:1: `unsafe` outside rdma/",
    "driver/a.rs:1: raw pointer type outside rdma/",
    'driver/a.rs:2: extern "C" outside rdma/',
    "driver/a.rs:2: `unsafe` outside rdma/",
    "rdma/b.rs:1: rdma/ imports crate::state",
    "rdma/b.rs:1: rdma/ names crate::state",
    "rdma/b.rs:3: unsafe block without a // SAFETY: comment",
    "rdma/b.rs:3: unsafe block of 17 lines",
    "rdma/b.rs:21: unsafe fn without a `# Safety` section",
    "rdma/b.rs:24: unsafe impl without a // SAFETY: comment",
    "rdma/b.rs: documents `# Invariants` but never says `// INVARIANT:`",
    "rdma/b.rs:27: unsafe fn without a `# Safety` section",
]


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for name, text in SELF_TEST.items():
            os.makedirs(os.path.join(d, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(d, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        errors = []
        for path, in_rdma in sources(d):
            check_file(path, in_rdma, errors)
        got = [e[len(d) + 1:] for e in errors]
    missing = [w for w in SELF_TEST_EXPECT if not any(g.startswith(w) for g in got)]
    for w in missing:
        print(f"self-test: not caught: {w}")
    extra = [g for g in got if not any(g.startswith(w) for w in SELF_TEST_EXPECT)]
    for g in extra:
        print(f"self-test: wrongly reported: {g}")
    print(f"layer rules self-test: {len(SELF_TEST_EXPECT) - len(missing)}/{len(SELF_TEST_EXPECT)} rules caught")
    return 1 if missing or extra else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "drivers", "ferroce")
    root = os.path.normpath(root)
    errors = []
    files = 0
    for path, in_rdma in sources(root):
        files += 1
        check_file(path, in_rdma, errors)
    for e in errors:
        print(e)
    print(f"layer rules: {files} files, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
