"""The systems the harness compares, behind one small interface.

Every system ingests a conversation once and then answers questions, returning
the context it answered from (so evidence recall and token counts are measured
the same way for all) and the answer. "strata" and its ablations go through the
public API; ablations that only change how questions are answered (granularity,
K_r) share one ingested namespace, and only "no-refresher" needs an ingest of
its own, because the refresher acts while turns are stored. The baselines live
in `evaluation.baselines`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field
from strata.agents.common import format_evidence
from strata.evaluation.metrics import ContextItem
from strata.evaluation.usage import Usage, track_usage
from strata.graph.context import Context
from strata.graph.state import Evidence
from strata.memory.embeddings import get_embedder
from strata.memory.errors import ConfigError

from strata.api import Memory
from strata.conversations import LoadedConversation
from strata.ingestion import ingest_conversation


class ContextEntry(BaseModel):
    """One item of the context an answer was written from."""

    id: str
    kind: str
    dialogue_id: str = ""
    source_ids: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, item: Evidence) -> ContextEntry:
        return cls(id=item.id, kind=item.kind, dialogue_id=item.dialogue_id, source_ids=list(item.source_ids))

    def metric_item(self) -> ContextItem:
        return ContextItem(self.kind, self.dialogue_id, tuple(self.source_ids))  # type: ignore[arg-type]


class Result(BaseModel):
    """What a system did for one question."""

    items: list[ContextEntry]
    context: str = Field(..., description="The context text exactly as counted for tokens.")
    answer: str
    cited_ids: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency: float = Field(..., description="Seconds from question to answer.")
    rounds: int = 0


class IngestStats(BaseModel):
    """What ingesting one conversation cost a system."""

    turns: int
    seconds: float
    usage: Usage = Field(default_factory=Usage)
    shared_with: str | None = Field(None, description="The system whose ingest this one reuses, if any.")
    records: dict[str, int] = Field(default_factory=dict)


class System(Protocol):
    """Anything the harness can evaluate."""

    name: str

    def ingest(self, conversation: LoadedConversation) -> IngestStats: ...

    def answer(self, question: str) -> Result: ...


class RunSettings(BaseModel):
    """What every system in one run shares: the same model, embedder and store folder."""

    data_dir: str
    model: str = ""
    base_url: str = ""
    embedder: str = "local:all-MiniLM-L6-v2"
    top_k: int = Field(10, ge=1, description="k of the dense and BM25 baselines.")
    budget: int = Field(
        default_factory=lambda: Context().token_budget,
        description="Context tokens of the @budget baselines: the project's own token budget.",
    )

    def memory_settings(self) -> dict[str, Any]:
        """The memory's own settings: the base URL only with a model (offline systems beside a judge served
        there take none, which a memory would refuse as unused)."""
        base_url = self.base_url if self.model.strip() else ""
        return {"data_dir": self.data_dir, "model": self.model, "base_url": base_url, "embedder": self.embedder}


# --- strata ------------------------------------------------------------------------------------


class StrataSpace:
    """One namespace holding one conversation, ingested once however many systems ask it."""

    def __init__(self, namespace: str, settings: RunSettings, owner: str, **ingest_settings: Any) -> None:
        self.namespace = namespace
        self.settings = settings
        self.owner = owner
        self.ingest_settings = ingest_settings
        self.stats: IngestStats | None = None

    def memory(self, **ask_settings: Any) -> Memory:
        return Memory(self.namespace, **self.settings.memory_settings(), **self.ingest_settings, **ask_settings)

    def ensure(self, conversation: LoadedConversation, on_turn: Any = None) -> tuple[IngestStats, bool]:
        """Ingest into a fresh namespace the first time; (stats, True when this call did the work)."""
        if self.stats is not None:
            return self.stats, False
        memory = self.memory()
        if memory.stats()["raw"]["active"]:
            _drop(memory)  # left over from an interrupted run: start fresh
            memory = self.memory()
        get_embedder(self.settings.embedder).clear()  # each ingest pays for its own embeddings
        with track_usage() as tally:
            summary = ingest_conversation(memory, conversation, on_turn=on_turn)
        self.stats = IngestStats(
            turns=summary.turns, seconds=summary.seconds, usage=tally.usage, records=summary.records()
        )
        return self.stats, True


def _drop(memory: Memory) -> None:
    from strata.memory.registry import close_all

    memory.drop()
    close_all()  # the cached store still points at the dropped collections


class StrataSystem:
    """The project through its public API, with some settings changed for an ablation."""

    def __init__(self, name: str, space: StrataSpace, **ask_settings: Any) -> None:
        self.name = name
        self.space = space
        self.ask_settings = ask_settings
        self._memory: Memory | None = None
        self.on_turn: Any = None

    def ingest(self, conversation: LoadedConversation) -> IngestStats:
        stats, fresh = self.space.ensure(conversation, self.on_turn)
        self._memory = self.space.memory(**self.ask_settings)
        return stats if fresh else stats.model_copy(update={"shared_with": self.space.owner})

    def answer(self, question: str) -> Result:
        if self._memory is None:
            raise ConfigError(f"system {self.name} was asked before it ingested the conversation")
        started = time.perf_counter()
        with track_usage() as tally:
            reply = self._memory.ask(question)
        latency = time.perf_counter() - started
        return Result(
            items=[ContextEntry.of(item) for item in reply.evidence],
            context=format_evidence(reply.evidence) if reply.evidence else "",
            answer=reply.answer or "",
            cited_ids=list(reply.cited_ids),
            usage=tally.usage,
            latency=latency,
            rounds=reply.rounds,
        )


# --- the line-up -------------------------------------------------------------------------------

# name -> (ingest variant, settings changed when asking); the default variant is strata's own ingest
STRATA_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "strata": ("default", {}),
    "raw-only": ("default", {"granularities": "raw"}),
    "fact-only": ("default", {"granularities": "fact"}),
    "episode-only": ("default", {"granularities": "episode"}),
    "no-refresher": ("no-refresher", {}),
    "k_r=0": ("default", {"k_r": 0}),
    "k_r=1": ("default", {"k_r": 1}),
    "k_r=2": ("default", {"k_r": 2}),
    "k_r=3": ("default", {"k_r": 3}),
}
INGEST_VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "no-refresher": {"refresher": False}}
BASELINES: tuple[str, ...] = ("full-context", "dense-rag", "bm25", "dense@budget", "bm25@budget")
ALL_SYSTEMS: tuple[str, ...] = ("strata", *BASELINES, *(n for n in STRATA_VARIANTS if n != "strata"))


def check_names(names: Sequence[str]) -> list[str]:
    """The requested systems in the canonical order, or a one-line error naming the known ones."""
    unknown = [n for n in names if n not in ALL_SYSTEMS]
    if unknown:
        raise ConfigError(f"unknown system(s) {', '.join(unknown)}: choose from {', '.join(ALL_SYSTEMS)}")
    if not names:
        raise ConfigError(f"no systems chosen: pick some of {', '.join(ALL_SYSTEMS)}")
    return [n for n in ALL_SYSTEMS if n in names]


def build_systems(names: Sequence[str], conversation_id: str, settings: RunSettings) -> list[System]:
    """Fresh systems for one conversation; strata variants on the same ingest share its namespace."""
    from strata.evaluation.baselines import Bm25Rag, BudgetRag, DenseRag, FullContext, TurnIndex

    spaces: dict[str, StrataSpace] = {}
    index: TurnIndex | None = None
    systems: list[System] = []
    for name in check_names(names):
        if name in STRATA_VARIANTS:
            variant, ask_settings = STRATA_VARIANTS[name]
            if variant not in spaces:
                spaces[variant] = StrataSpace(
                    f"eval-{conversation_id}-{variant}", settings, owner=name, **INGEST_VARIANTS[variant]
                )
            systems.append(StrataSystem(name, spaces[variant], **ask_settings))
            continue
        if index is None:
            index = TurnIndex(settings)
        if name == "full-context":
            systems.append(FullContext(index))
        elif name == "dense-rag":
            systems.append(DenseRag(index, settings.top_k))
        elif name == "bm25":
            systems.append(Bm25Rag(index, settings.top_k))
        else:
            systems.append(BudgetRag(index, name.split("@", 1)[0], settings.budget))
    return systems
