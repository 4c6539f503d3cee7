"""How many offline facts carry a subject / attribute / value, per LoCoMo conversation.

Conflict detection and persona traits compare facts by attribute, so a change to
the fact extractor should not lose attributes it found before. This prints, per
conversation, the facts extracted from every turn (session date as the anchor,
the other participant as listener) and how many have an attribute, and with
`--out` writes every fact as one JSON line, so two versions can be compared:

    .venv/bin/python benchmarks/fact_attributes.py ../shared/data/locomo/conv-*.json --out facts.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from strata.memory.facts import extract_facts

from strata.conversations import load_turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", default="", help="write every fact as a JSON line here")
    args = parser.parse_args(argv)
    rows: list[dict[str, str]] = []
    print("| conversation | turns | facts | with attribute | share |")
    print("|---|---|---|---|---|")
    totals: Counter[str] = Counter()
    for file in args.files:
        conversation = load_turns(file)
        facts = with_attribute = turns = 0
        for turn in conversation.turns():
            turns += 1
            for draft in extract_facts(turn, turn.time, turn.listener):
                facts += 1
                with_attribute += bool(draft.attribute)
                totals[draft.attribute or "-"] += 1
                rows.append({"conversation": conversation.conversation_id, "dia_id": turn.dia_id or "",
                             "text": draft.text, "subject": draft.subject, "attribute": draft.attribute,
                             "value": draft.value})
        share = with_attribute / facts if facts else 0.0
        print(f"| {conversation.conversation_id} | {turns} | {facts} | {with_attribute} | {share:.3f} |")
    print("attributes:", ", ".join(f"{name} {count}" for name, count in totals.most_common(12)))
    if args.out:
        Path(args.out).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
