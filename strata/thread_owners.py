"""Whose a saved thread is when its states do not say.

A run records its namespace on its thread (graph/state.py `start_run`), and every state saved after that
says it. A thread saved before runs recorded it says nothing. Such a thread is known by the records it
holds: a turn's dialogue id or an evidence item's record id beside its text is a record of each
namespace holding a record by that id with that text now. A thread whose records are all one
namespace's is that namespace's; one holding several namespaces' records (two namespaces both hold
"hi" as `raw:T1`, or runs of two namespaces on one thread) or none's (erased, dropped, or never stored)
cannot be told, and an erase or a drop names it instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from strata.memory.erasure import Said
from strata.memory.records import KINDS
from strata.memory.registry import ledger_for, open_store
from strata.memory.settings import StoreSettings

Holders = Callable[[set[Said]], set[str]]  # the namespaces holding a record by one of some (id, text) pairs
Owner = Literal["this", "another", "unknown"]


def record_id(name: str) -> str:
    """The record a saved state names: an evidence item by its record id, a turn by its dialogue id."""
    return name if name.split(":", 1)[0] in KINDS and ":" in name else f"raw:{name}"


def holders_in(settings: StoreSettings) -> Holders:
    """`Holders` over the memory at `settings` (its ledger says which namespaces hold each id; the records
    themselves, whether with that text)."""

    def holders(pairs: set[Said]) -> set[str]:
        texts: dict[str, set[str]] = {}
        for name, text in pairs:
            texts.setdefault(record_id(name), set()).add(text)
        found: set[str] = set()
        for namespace, ids in ledger_for(settings).namespaces_holding(texts).items():
            records = open_store(settings, namespace).get(ids)
            if any(record.text in texts[record.id] for record in records):
                found.add(namespace)
        return found

    return holders


def owner(holders: set[str], namespace: str) -> Owner:
    """Whose a thread is, by the namespaces holding its records."""
    if holders == {namespace}:
        return "this"
    return "another" if holders and namespace not in holders else "unknown"


def unattributed_line(threads: Iterable[str], shown: Callable[[list[str]], str]) -> str:
    """The one line an erase or a drop gives for the threads it left because nothing says whose they are."""
    threads = sorted(threads)
    return (f"{len(threads)} saved threads say not whose they are (saved before runs recorded their namespace, "
            f"and holding records of no namespace or of several), kept: {shown(threads)}; delete those that were "
            "this namespace's with the checkpointer's delete_thread")
