"""One replica of a deployment, run as its own process by the multi-process tests.

It opens a memory from STRATA_* variables (Chroma server, PostgreSQL ledger, its
own local data folder) and serves commands read as JSON lines on stdin, one JSON
reply line each on stdout, so a test can keep several replicas warm and check
what each sees after another one wrote.

    python tests/replica.py NAMESPACE DATA_DIR
"""

from __future__ import annotations

import json
import sys
from typing import Any

from strata.memory.errors import StrataError
from strata.memory.registry import close_all

from strata.api import Memory
from strata.langgraph_store import StrataStore


def serve(memory: Memory, command: dict[str, Any]) -> Any:
    op = command["op"]
    store = memory.store
    if op == "add":
        return {"stored": len(memory.add(command["turns"]).stored_ids)}
    if op == "ask":
        answer = memory.ask(command["question"])
        return {"evidence": answer.evidence_ids(), "answer": answer.answer}
    if op == "get":
        found = store.get([command["id"]])
        return {"text": found[0].text, "status": found[0].status.value} if found else None
    if op == "lexical":
        return [rid for rid, _ in store.lexical(command["kind"], command["query"], 10)]
    if op == "update":
        return {"change": store.update(command["id"], command["text"], reason="replica test", policy="user").id}
    if op == "undo":
        return {"change": memory.undo().id}
    if op == "drop":
        memory.drop()
        return None
    if op == "history":
        return [c.id for c in store.history(command.get("id"))]
    if op.endswith("_item"):  # the LangGraph store over the same memory (strata/langgraph_store.py)
        items = StrataStore.from_memory(memory)
        where = tuple(command["namespace"])
        if op == "put_item":
            items.put(where, command["key"], command["value"])
            return None
        if op == "get_item":
            item = items.get(where, command["key"])
            return None if item is None else item.value
        if op == "search_item":
            return [hit.key for hit in items.search(where, query=command["query"], limit=3)]
        if op == "delete_item":
            items.delete(where, command["key"])
            return None
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    namespace, data_dir = sys.argv[1:3]
    memory = Memory(namespace, data_dir=data_dir)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            reply: dict[str, Any] = {"ok": serve(memory, json.loads(line))}
        except StrataError as error:
            reply = {"error": str(error), "type": type(error).__name__}
        print(json.dumps(reply), flush=True)
    close_all()  # return the ledger's connections before the process ends


if __name__ == "__main__":
    main()
