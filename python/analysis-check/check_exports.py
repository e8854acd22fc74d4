"""Checks the workflow nets weft exports for the example plans with the reference of
generate.py, on pm4py's reading of each file, and writes examples.json for
crates/weft-analysis/tests/differential.rs.

Usage: python check_exports.py EXPORT_DIR OUT.json < /dev/null
(EXPORT_DIR from `WEFT_ANALYSIS_EXPORT_DIR=EXPORT_DIR cargo test -p weft-analysis --test
differential example_plans`.)
"""

import json
import os
import sys

import pm4py

from generate import SMALL_STATES, reference


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = {}
    for name in sorted(os.listdir(src)):
        if not name.endswith(".pnml"):
            continue
        path = os.path.join(src, name)
        net, im, fm = pm4py.read_pnml(path)
        ref = reference(net, im, fm, SMALL_STATES)
        if ref is None:
            sys.exit(f"{name}: too many states for the reference")
        with open(path, encoding="utf-8") as f:
            ref["pnml"] = f.read()
        rows[name[: -len(".pnml")]] = ref
        print(f"{name}: sound={ref['sound']} {ref}", file=sys.stderr)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
