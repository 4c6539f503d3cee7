"""Do two ingests store the same memory? Compares two `ingest_and_query.py --snapshot` files.

Records are compared field by field (by id, every kind), links by (src, dst, type)
with their weights (to 4 decimals), history entries in order. It prints the count
of each kind of difference and the first few examples; the exit status is 0 when
the two are identical, 1 otherwise.

    .venv/bin/python benchmarks/compare_snapshots.py before.json after.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

EXAMPLES = 5


def record_differences(before: dict[str, list[dict[str, Any]]], after: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per record only one side holds, or per field that differs."""
    lines: list[str] = []
    for kind in sorted(set(before) | set(after)):
        old = {r["id"]: r for r in before.get(kind, [])}
        new = {r["id"]: r for r in after.get(kind, [])}
        lines += [f"{kind}: only before: {rid}" for rid in sorted(set(old) - set(new))]
        lines += [f"{kind}: only after: {rid}" for rid in sorted(set(new) - set(old))]
        for rid in sorted(set(old) & set(new)):
            for field in sorted(set(old[rid]) | set(new[rid])):
                if old[rid].get(field) != new[rid].get(field):
                    lines.append(f"{kind}: {rid}.{field}: {old[rid].get(field)!r} -> {new[rid].get(field)!r}")
    return lines


def link_differences(before: list[list[Any]], after: list[list[Any]]) -> tuple[list[str], Counter[str]]:
    """Links only one side holds or whose weight differs, and the count per link type."""
    old = {(s, d, t): w for s, d, t, w in before}
    new = {(s, d, t): w for s, d, t, w in after}
    lines: list[str] = []
    per_type: Counter[str] = Counter()
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines.append(f"{key[2]} {key[0]} -> {key[1]}: {old.get(key)} -> {new.get(key)}")
            per_type[key[2]] += 1
    return lines, per_type


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    try:
        before, after = (json.loads(path.read_text()) for path in (args.before, args.after))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"compare_snapshots: error: {exc}: pass two files written by ingest_and_query.py --snapshot",
              file=sys.stderr)
        return 2
    records = record_differences(before["records"], after["records"])
    links, per_type = link_differences(before["links"], after["links"])
    history = [
        f"#{i}: {a} -> {b}" for i, (a, b) in enumerate(zip(before["history"], after["history"], strict=False)) if a != b
    ]
    if len(before["history"]) != len(after["history"]):
        history.append(f"history length {len(before['history'])} -> {len(after['history'])}")
    counts = {kind: len(rows) for kind, rows in after["records"].items()}
    print(f"records after: {counts}; links {len(after['links'])}; history {len(after['history'])}")
    for name, lines in (("records", records), ("links", links), ("history", history)):
        print(f"{name}: {len(lines)} differences")
        for line in lines[:EXAMPLES]:
            print(f"  {line}")
    if per_type:
        print("link differences by type: " + ", ".join(f"{t} {n}" for t, n in sorted(per_type.items())))
    return 0 if not (records or links or history) else 1


if __name__ == "__main__":
    raise SystemExit(main())
