"""The memory graph's write side: entity nodes, A-MEM notes and links, memory
evolution, the slow-path consolidation (causal links, denser entity links) and
summary records; and its read side: the query-time traversal of the typed
edges (`traversal.py`, `view.py`) and the export of the graph for people and
tools (`export.py`).

MAGMA (sections 3.2 and 3.4) keeps one store of events with several typed edge
sets (temporal, causal, semantic, entity) and splits writing into a fast path on
every turn and a slow consolidation pass; A-MEM (sections 3.1-3.3) builds a note
per memory, links it to its nearest notes and lets it refine them; AdaMem
regroups episodic memory into topic and persona summaries. Each module here does
one of those jobs; `agents/memory.py` only calls them.
"""
