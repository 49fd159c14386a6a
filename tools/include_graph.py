#!/usr/bin/env python3
# include_graph.py - the room-to-room #include graph of src/, drawn on floors, with every include
# that runs upward (to a higher floor) or sideways (to another room on the same floor).
#
# Rooms are the folders of src/ (a file directly in src/, if any, counts as the room "cli").
# Floors are the layering docs/architecture.md declares (FLOORS below): a room may include rooms
# on lower floors only. The report is Markdown, so a session can paste it before and after a move.
# Usage: include_graph.py [--root DIR] [--check]
#   --check  exit 1 when any include runs upward (for the day the tree has none)
# Plain python3, standard library only.

import os
import re
import sys
from collections import defaultdict

# Lowest floor first. A room missing here is reported (and placed on floor 99).
FLOORS = [
    ["core"],
    ["cpu", "cuda", "tok"],
    ["model"],
    ["io", "data", "dist"],
    ["train", "eval"],
    ["cli"],
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

def room_of(rel):
    """Room of a path under src/: its first folder (src/cli/ is the room cli), or cli for a file
    directly in src/."""
    parts = rel.split("/")
    return "cli" if len(parts) == 2 else parts[1]


def floor_of(room):
    for i, rooms in enumerate(FLOORS):
        if room in rooms:
            return i
    return 99


def scan(root):
    """[(src_rel, line_no, target_rel)] for every project #include under src/."""
    edges = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "src")):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith((".c", ".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                for i, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    # "x/y.h" is relative to src/ (-Isrc); a bare "y.h" to the including file
                    for cand in (os.path.join("src", inc), os.path.join(os.path.dirname(rel), inc)):
                        if os.path.isfile(os.path.join(root, cand)):
                            edges.append((rel, i, os.path.normpath(cand)))
                            break
    return edges


def report(root):
    edges = scan(root)
    rooms = defaultdict(set)
    arrows = defaultdict(int)
    upward, sideways = [], []
    for src, line, dst in edges:
        a, b = room_of(src), room_of(dst)
        rooms[a].add(src)
        rooms[b].add(dst)
        if a == b:
            continue
        arrows[(a, b)] += 1
        fa, fb = floor_of(a), floor_of(b)
        entry = f"{src}:{line} -> {dst} ({a}, floor {fa} -> {b}, floor {fb})"
        if fb > fa:
            upward.append(entry)
        elif fb == fa:
            sideways.append(entry)
    out = ["## Floors (highest first) and rooms", "", "| floor | rooms (files) |", "|---|---|"]
    placed = set()
    for i in reversed(range(len(FLOORS))):
        cells = [f"{r} ({len(rooms[r])})" for r in FLOORS[i] if r in rooms]
        placed.update(FLOORS[i])
        out.append(f"| {i} | {', '.join(cells) if cells else '-'} |")
    for r in sorted(set(rooms) - placed):
        out.append(f"| 99 | {r} ({len(rooms[r])}) (not in FLOORS) |")
    out += ["", "## Arrows (room -> room: number of #include lines)", ""]
    for a in sorted(rooms, key=lambda r: (-floor_of(r), r)):
        row = [(b, n) for (x, b), n in arrows.items() if x == a]
        if row:
            row.sort(key=lambda t: (-floor_of(t[0]), t[0]))
            out.append(f"* {a} -> " + ", ".join(f"{b} {n}" for b, n in row))
    cycles = sorted({tuple(sorted((a, b))) for (a, b) in arrows if (b, a) in arrows})
    out += ["", "## Room cycles (each room includes the other)", ""]
    out += [f"* {a} <-> {b}" for a, b in cycles] or ["* none"]
    out += ["", f"## Upward includes ({len(upward)})", ""]
    out += [f"* {e}" for e in upward] or ["* none"]
    out += ["", f"## Sideways includes, same floor ({len(sideways)})", ""]
    out += [f"* {e}" for e in sideways] or ["* none"]
    return "\n".join(out) + "\n", upward


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
    text, upward = report(root)
    sys.stdout.write(text)
    if "--check" in argv and upward:
        print(f"include_graph: {len(upward)} upward include(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
