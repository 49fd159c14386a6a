#!/usr/bin/env python3
# check_spec_refs.py - every `NAME.md §X.Y` citation in the tree names a document and a section
# that exist; `make check-refs` runs it and `make test` runs that first.
#
# What counts as a reference (in src/, tests/, tools/, bench/, fuzz/, docs/, README.md):
#   NAME.md §X.Y | NAME.md section X.Y   the document must exist (docs/spec/NAME.md, then
#                                         docs/NAME.md) and have a heading numbered X.Y
#                                         ("## X. Title" or "### X.Y Title"); ranges such as
#                                         §6.1-6.3 or §2–3 check both ends
#   NAME.md#anchor                        the document must have a heading with that slug
#   docs/PATH.md                          the file must exist (path from the repository root)
#   a bare §X.Y (or "section X.Y")        cites the spec document named last before it on the
#                                         same line; else, inside a spec document, that document
#                                         itself (any Markdown file with numbered headings);
#                                         else the one cited last earlier in the file
# Output: one line per broken reference, "path:line: reference: why"; exit 1 if any.
# Usage: check_spec_refs.py [ROOT]      (default: the repository holding this script)
#        check_spec_refs.py --self-test (plants good and broken references in a temporary tree)
# Plain python3, standard library only.

import os
import re
import sys
import tempfile

SCAN_DIRS = ["src", "tests", "tools", "bench", "fuzz", "docs"]
SCAN_FILES = ["README.md"]
DOC_DIRS = ["docs/spec", "docs"]
SKIP = {"tools/check_spec_refs.py"}  # its self-test plants broken references
TEXT_EXT = (".c", ".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".md", ".yaml", ".yml", ".txt", ".json")

NUM = r"\d+(?:\.\d+)*"
# a section number, optionally a range to a second one: 6.1-6.3, 2–3
SEC = rf"({NUM})(?:\s*[-–]\s*({NUM}))?"
SPEC_STEMS = "kda-model|data-formats|training-recipe|performance|engineering-notes|style"
# a Markdown file name (with any folders), or a spec document's stem without ".md"
DOC = rf"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md|(?:{SPEC_STEMS})(?![\w.-]))"
# a document name, optional closing backtick, then § or "section" and a number
# (a Markdown link [text](NAME.md) before the § counts too)
DOC_SEC = re.compile(DOC + r"(?:`|\))?\s*(?:§\s*|section\s+)" + SEC)
DOC_ANCHOR = re.compile(DOC + r"#([\w-]+)")
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/(?:[\w.-]+/)*[\w.-]+\.md)")
ANY_DOC = re.compile(DOC)
BARE_SEC = re.compile(r"(?:§\s*|\bsection\s+)" + SEC)


def headings(path):
    """Section numbers and GitHub anchor slugs of a Markdown file."""
    numbers, slugs = set(), set()
    fenced = False  # inside a ``` block a "# ..." line is code, not a heading
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*$", line)
            if not m:
                continue
            title = m.group(1)
            n = re.match(r"(\d+(?:\.\d+)*)\.?\s", title + " ")
            if n:
                numbers.add(n.group(1))
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            slugs.add(slug)
    return numbers, slugs


class Checker:
    def __init__(self, root):
        self.root = root
        self.cache = {}
        self.errors = []

    def resolve(self, name):
        """Repository-relative path of a cited document, or None."""
        if not name.endswith(".md"):
            name += ".md"
        if "/" in name:
            cands = [name, os.path.join("docs", os.path.basename(name))]
        elif name.endswith(".md") and os.path.isfile(os.path.join(self.root, name)):
            cands = [name]
        else:
            cands = [os.path.join(d, name) for d in DOC_DIRS]
        for c in cands:
            if os.path.isfile(os.path.join(self.root, c)):
                return c
        return None

    def heads(self, rel):
        if rel not in self.cache:
            self.cache[rel] = headings(os.path.join(self.root, rel))
        return self.cache[rel]

    def bad(self, where, ref, why):
        self.errors.append(f"{where}: {ref}: {why}")

    def check_sections(self, where, ref, name, secs):
        rel = self.resolve(name)
        if rel is None:
            self.bad(where, ref, f"no document {name} in {' or '.join(DOC_DIRS)}")
            return
        numbers, _ = self.heads(rel)
        for s in secs:
            if s and s not in numbers:
                self.bad(where, ref, f"{rel} has no section {s}")

    def foreign(self, path):
        """docs/A/B.md under a folder docs/ does not have: another repository's path."""
        parts = path.split("/")
        return len(parts) > 2 and not os.path.isdir(os.path.join(self.root, *parts[:2]))

    def spec(self, name):
        """Whether a cited name is one of docs/spec/'s documents."""
        rel = self.resolve(name)
        return rel is not None and self.is_spec_doc(rel)

    def is_spec_doc(self, rel):
        return rel.startswith("docs/spec/") and rel.endswith(".md")

    def check_file(self, rel):
        try:
            with open(os.path.join(self.root, rel), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (UnicodeDecodeError, OSError):
            return
        # A bare § inside a Markdown file with numbered headings cites that file itself.
        own = rel if rel.endswith(".md") and self.heads(rel)[0] else None
        current = None  # the document a bare § cites
        for i, line in enumerate(lines, 1):
            where = f"{rel}:{i}"
            for m in DOCS_PATH.finditer(line):
                if self.foreign(m.group(1)):
                    continue
                if not os.path.isfile(os.path.join(self.root, m.group(1))):
                    self.bad(where, m.group(1), "no such file")
            for m in DOC_ANCHOR.finditer(line):
                name, anchor = m.group(1), m.group(2)
                rel_doc = self.resolve(name)
                if rel_doc is None:
                    self.bad(where, m.group(0), f"no document {name}")
                elif anchor not in self.heads(rel_doc)[1]:
                    self.bad(where, m.group(0), f"{rel_doc} has no heading #{anchor}")
            # Walk the line's document names and § numbers left to right. A document cited with
            # a §, or a spec document named without one, is the one a bare § after it on the
            # same line cites, and (outside the spec documents) on the lines below.
            cited = {m.start(): m for m in DOC_SEC.finditer(line)}
            names = [
                m
                for m in ANY_DOC.finditer(line)
                if m.start() in cited or (m.group(1).endswith(".md") and self.spec(m.group(1)))
            ]
            line_doc, pos = None, 0
            for m in names:
                if m.start() < pos:
                    continue
                self.bare_refs(where, line[pos : m.start()], line_doc or own or current)
                c = cited.get(m.start())
                if c:
                    self.check_sections(where, c.group(0), c.group(1), [c.group(2), c.group(3)])
                pos = c.end() if c else m.end()
                line_doc = current = m.group(1)
            self.bare_refs(where, line[pos:], line_doc or own or current)

    def bare_refs(self, where, text, doc):
        for m in BARE_SEC.finditer(text):
            if doc is None:
                if m.group(0).startswith("§"):
                    self.bad(where, m.group(0), "§ without a document named before it")
                continue
            self.check_sections(where, f"({doc}) {m.group(0)}", doc, [m.group(1), m.group(2)])

    def files(self):
        out = [f for f in SCAN_FILES if os.path.isfile(os.path.join(self.root, f))]
        for d in SCAN_DIRS:
            for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, d)):
                dirnames[:] = sorted(x for x in dirnames if not x.startswith("."))
                for fn in sorted(filenames):
                    if fn.endswith(TEXT_EXT) or fn == "Makefile":
                        out.append(os.path.relpath(os.path.join(dirpath, fn), self.root))
        return out

    def run(self):
        for rel in self.files():
            if rel not in SKIP:
                self.check_file(rel)
        return self.errors


def self_test():
    """Plant references in a throwaway tree: the good ones must pass, each broken one fail."""
    good = [
        "// a.c - see kda-model.md §3.2 and §1, §2.1-2.2",
        "// `kda-model.md` §2–3, then (§3.2 step 4)",
        "# model: kda-model.md section 3.2",
        "// docs/spec/kda-model.md §1 and docs/notes.md, kda-model.md#3-state-dict",
        "// later in the file: §2.2 cites kda-model.md",
        "// a citation split over lines names kda-model.md",
        "// §1.1 on the next line, then FLOPs (kda-model §2.1) by stem",
        "// another repository's `docs/guides/x.md` is not ours",
    ]
    broken = [
        ("// kda-model.md §3.9", "has no section 3.9"),
        ("// missing.md §1", "no document missing.md"),
        ("// kda-model.md §1, §7", "has no section 7"),
        ("// kda-model.md §2.1-2.7", "has no section 2.7"),
        ("// docs/absent.md", "no such file"),
        ("// kda-model.md#no-such-heading", "has no heading"),
        ("// §4 cites nothing", "without a document"),
        ("// kda-model §1.9 by stem", "has no section 1.9"),
    ]
    doc = "# Title\n## 1. One\n### 1.1 Sub\n## 2. Two\n### 2.1 A\n### 2.2 B\n## 3. State dict\n### 3.2 C\n"
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs/spec"))
        os.makedirs(os.path.join(root, "src"))
        with open(os.path.join(root, "docs/spec/kda-model.md"), "w") as f:
            f.write(doc + "A bare §2.1 cites this document; §9 does not exist.\n")
        with open(os.path.join(root, "docs/notes.md"), "w") as f:
            f.write("notes\n")
        with open(os.path.join(root, "src/good.c"), "w") as f:
            f.write("\n".join(good) + "\n")
        errs = Checker(root).run()
        spec_errs = [e for e in errs if e.startswith("docs/spec/kda-model.md")]
        other = [e for e in errs if e not in spec_errs]
        if other:
            print("self-test: good references reported broken:\n  " + "\n  ".join(other))
            failures += 1
        if len(spec_errs) != 1 or "no section 9" not in spec_errs[0]:
            print(f"self-test: the spec's own bare §9 should be the one error, got {spec_errs}")
            failures += 1
        os.remove(os.path.join(root, "docs/spec/kda-model.md"))
        with open(os.path.join(root, "docs/spec/kda-model.md"), "w") as f:
            f.write(doc)
        for line, why in broken:
            with open(os.path.join(root, "src/bad.c"), "w") as f:
                f.write(line + "\n")
            errs = [e for e in Checker(root).run() if e.startswith("src/bad.c")]
            if len(errs) != 1 or why not in errs[0]:
                print(f"self-test: {line!r} should give one error containing {why!r}, got {errs}")
                failures += 1
    print(f"check_spec_refs self-test: {len(broken) + 2 - failures} passed, {failures} failed")
    return 1 if failures else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errs = Checker(root).run()
    for e in errs:
        print(e)
    if errs:
        print(f"check_spec_refs: {len(errs)} broken reference(s)", file=sys.stderr)
        return 1
    print("check_spec_refs: all spec references resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
