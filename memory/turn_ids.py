"""What a turn's dialogue id promises: it names one stored turn, and sending it again changes nothing.

Ids are the caller's (LoCoMo's `D1:3`, an app's message id) or given in order (`T1`, `T2`, ...).
A turn sent again with the same words is skipped, so re-ingesting is idempotent. Sent with other
words, it would replace the stored turn with no history entry to undo it by, and the facts derived
from the old words would stay: two conversations sent into one namespace, whose ids both start at
`D1:1`, would silently become one. Such an input is refused whole, before anything is written, and so is
a dia_id starting with `item:`: its record id would be a LangGraph store item's (strata/langgraph_store.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from textwrap import shorten

from strata.memory.errors import InputError
from strata.memory.records import Turn
from strata.memory.store import MemoryStore
from strata.memory.store_items import ITEM_PREFIX

ITEM_DIA_PREFIX = ITEM_PREFIX.removeprefix("raw:")  # a turn's record is raw:<dia_id>; raw:item:<key> is a store item
TURN_COUNTER = "turn_counter"  # ledger state: the last number given to a turn without an id (T1, T2, ...)
_NUMBERED = re.compile(r"T(\d{1,18})")  # the form of those ids (18 digits: within the ledger's 64-bit counter)


def highest_numbered(dia_ids: Iterable[str]) -> int:
    """The highest n of the dialogue ids written T<n>, the form of the ids turns without one are given (a
    caller may give such ids too, or an import bring them): the counter must pass it. 0 for none."""
    return max((int(found.group(1)) for i in dia_ids if (found := _NUMBERED.fullmatch(i))), default=0)


def check_turn_ids(store: MemoryStore, turns: Sequence[Turn]) -> dict[str, str]:
    """Refuse, in one line, turns that share an id, or whose id holds other words in this memory; else the
    stored text of each id already stored (a turn whose text it is will be skipped)."""
    reserved = next((t.dia_id for t in turns if (t.dia_id or "").startswith(ITEM_DIA_PREFIX)), None)
    if reserved is not None:
        raise InputError(
            f"turn id {reserved!r} starts with {ITEM_DIA_PREFIX!r}, which the LangGraph store's items use "
            f"(record raw:{ITEM_DIA_PREFIX}<key>): give the turn another id (or none); nothing was stored"
        )
    seen: dict[str, int] = {}
    for n, turn in enumerate(turns, start=1):
        if turn.dia_id in seen:
            raise InputError(
                f"turns {seen[turn.dia_id]} and {n} share the id {turn.dia_id!r}: give each turn its own dia_id"
            )
        seen[turn.dia_id or ""] = n
    stored = {r.id: r.text for r in store.get(f"raw:{t.dia_id}" for t in turns if t.dia_id)}
    clashes = [t for t in turns if stored.get(f"raw:{t.dia_id}", t.text) != t.text]
    if clashes:
        first = clashes[0]
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        words = shorten(stored[f"raw:{first.dia_id}"], 50, placeholder="...")
        raise InputError(
            f"turn {first.dia_id}{more} is already stored with other words ({words!r}): give each new turn an id "
            "of its own (or none), or store another conversation in another namespace; nothing was stored"
        )
    return stored
