#!/usr/bin/env python3
"""Where a build's compile time went, from Ninja's own log (docs/TESTING.md, "What made it fit").

    scripts/build-times.py BUILD_DIR [TOP]

Prints the compile time summed over the steps that made an object or a precompiled header,
the share of it under tests/, and the TOP (default 10) longest steps. Ninja's log keeps the
last run of each step, so read it after a cold build (CCACHE_DISABLE=1) for a cold figure."""
import os
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = os.path.join(sys.argv[1], ".ninja_log")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    steps = {}
    with open(path) as log:
        for line in log:
            if line.startswith("#"):
                continue
            start, end, _, out, _ = line.rstrip("\n").split("\t")
            if out.endswith((".o", ".gch", ".pch")):
                steps[out] = (int(end) - int(start)) / 1000  # a later line of a step replaces it
    total = sum(steps.values())
    tests = sum(s for out, s in steps.items() if out.startswith("tests/"))
    print(f"{path}: compile time summed over {len(steps)} steps {total:.0f} s, tests/ {tests:.0f} s")
    for out, s in sorted(steps.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {s:6.1f} s  {out}")


if __name__ == "__main__":
    main()
