"""Join ncu_compare records of device sessions at the same kernel sources (FA4 can only be
profiled on a machine where it was unpacked, which a session may lose): each (phase, impl, D)
row is taken from the first record, in argument order, that profiled it; every row names the
session it came from, and the provenance of each session is kept.

Usage: python tools/merge_ncu_compare.py FIRST.json SECOND.json [...] OUT.json
"""

from __future__ import annotations

import json
import sys


def main():
    *paths, out = sys.argv[1:]
    records = [json.load(open(p)) for p in paths]
    prints = {(r.get("kernel_fingerprint") or {}).get("sha256") for r in records}
    if len(prints) != 1 or None in prints:
        raise SystemExit(f"records of different (or unknown) kernel sources: {prints}")
    merged = dict(records[0])
    merged["sessions"] = [r["provenance"] for r in records]
    rows = []
    for row in records[0]["rows"]:
        key = (row["phase"], row["impl"], row["D"])
        for i, rec in enumerate(records):
            profiled = [r for r in rec["rows"] if "kernels" in r]
            found = next((r for r in profiled if (r["phase"], r["impl"], r["D"]) == key), None)
            if found is not None:
                rows.append(dict(found, session=i))
                break
        else:
            rows.append(dict(row, session=0))
    merged["rows"] = rows
    with open(out, "w") as f:
        f.write(json.dumps(merged, indent=1, default=float) + "\n")
    taken = [sum(r["session"] == i for r in rows) for i in range(len(records))]
    print("wrote", out, "rows per session:", taken)


if __name__ == "__main__":
    main()
