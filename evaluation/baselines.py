"""The baselines: full context, plain dense RAG and BM25 over raw turns.

Dense RAG and BM25 run twice: with the usual top-k (k=10), and filled up to the
project's own token budget, so recall can be compared at equal context size.

They answer with the project's own Working role (its chat-model policy when a
model is configured, its offline policy otherwise), given the turns they
retrieved as evidence, so a difference in the scores comes from what reached
the context and not from a different answerer. They use the run's embedder,
with no judge, no retry and no refresher. Items are labelled exactly as the
project labels evidence, and a ranked turn is shown as the project shows it
(without its small talk, `brief_turns`), so token counts compare like with
like; the full-context baseline reads the whole conversation as it was said.
"""

from __future__ import annotations

import time

import numpy as np
from langgraph.runtime import Runtime
from strata.agents.common import evidence_of, format_evidence
from strata.evaluation.systems import ContextEntry, IngestStats, Result, RunSettings
from strata.evaluation.usage import track_usage
from strata.graph.context import Context
from strata.graph.state import Evidence, State
from strata.memory.bm25 import BM25Index
from strata.memory.embeddings import get_embedder
from strata.memory.errors import ConfigError
from strata.memory.records import Record, raw_record

from strata.conversations import LoadedConversation


def lexical_text(record: Record) -> str:
    """What BM25 indexes for a turn: speaker, text and photo caption (as the project's store does)."""
    return " ".join(part for part in (record.speaker, record.text, record.image_caption) if part)


def dense_text(record: Record) -> str:
    """What dense RAG embeds for a turn: "speaker: text", the usual way to embed dialogue turns.

    Without the speaker, a question naming a participant matches the turns that
    address them by name rather than the turns they said (on conv-26 top-10
    recall drops from 0.47 to 0.23), which would make a straw-man baseline.
    """
    return f"{record.speaker}: {record.text}" if record.speaker else record.text


def turn_records(conversation: LoadedConversation) -> list[Record]:
    """Every turn as the raw record the project would store for it (same id, label and text)."""
    namespace = f"eval-{conversation.conversation_id}-turns"
    return [raw_record(turn, namespace) for turn in conversation.turns()]


def full_context_text(records: list[Record]) -> str:
    """The whole conversation labelled as evidence: what the full-context baseline reads."""
    return format_evidence([evidence_of(r) for r in records])


class TurnIndex:
    """A conversation's raw turns, embedded and BM25-indexed once, shared by the three baselines."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.records: list[Record] = []
        self.vectors: np.ndarray = np.zeros((0, 0), dtype=np.float32)
        self.bm25 = BM25Index()
        self.full_context = ""
        self.people: tuple[str, ...] = ()  # a ranked turn is shown as strata shows it: without its small talk
        self.stats: IngestStats | None = None
        self.owner = ""

    def ensure(self, conversation: LoadedConversation, owner: str) -> tuple[IngestStats, bool]:
        """Index the turns the first time (charged to `owner`); (stats, True when this call did the work)."""
        if self.stats is not None:
            return self.stats, False
        self.owner = owner
        started = time.perf_counter()
        self.records = turn_records(conversation)
        self.people = tuple(conversation.participants)
        embedder = get_embedder(self.settings.embedder)
        texts = [dense_text(r) for r in self.records]
        with track_usage() as tally:  # an OpenAI embedder is not a chat model: calls stay 0
            # past the shared cache, so the index time is what embedding the turns really costs
            self.vectors = embedder.inner.embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        for position, record in enumerate(self.records):
            self.bm25.add(str(position), lexical_text(record))
        self.full_context = full_context_text(self.records)
        self.stats = IngestStats(
            turns=len(self.records), seconds=time.perf_counter() - started, usage=tally.usage,
            records={"raw": len(self.records)},
        )
        return self.stats, True

    def dense(self, question: str, k: int) -> list[Evidence]:
        query = get_embedder(self.settings.embedder).embed([question])[0]
        scores = self.vectors @ query
        top = np.argsort(-scores, kind="stable")[:k]
        return [evidence_of(self.records[i], float(scores[i]), ["dense"], self.people) for i in top]

    def lexical(self, question: str, k: int) -> list[Evidence]:
        return [evidence_of(self.records[int(i)], score, ["bm25"], self.people)
                for i, score in self.bm25.search(question, k)]

    def everything(self) -> list[Evidence]:
        return [evidence_of(r) for r in self.records]


def answer_from(question: str, evidence: list[Evidence], context: Context) -> tuple[str, list[str]]:
    """The Working role's answer and cited ids for this evidence: the graph's own node, run on its own."""
    from strata.agents.wire import new_question
    from strata.agents.working import working

    new_question(context)  # the one context serves every question: each gets the full model-call budget
    update = working(State(question=question, evidence=evidence), Runtime(context=context))
    return str(update.get("answer") or ""), list(update.get("cited_ids") or [])


class _Baseline:
    """Shared ingest and answer steps; subclasses only choose the evidence."""

    name = ""

    def __init__(self, index: TurnIndex) -> None:
        self.index = index
        self.context = Context(namespace="evaluation", mode="ask", **index.settings.memory_settings())

    def ingest(self, conversation: LoadedConversation) -> IngestStats:
        stats, fresh = self.index.ensure(conversation, self.name)
        return stats if fresh else stats.model_copy(update={"shared_with": self.index.owner})

    def retrieve(self, question: str) -> list[Evidence]:
        raise NotImplementedError

    def context_text(self, evidence: list[Evidence]) -> str:
        return format_evidence(evidence) if evidence else ""

    def answer(self, question: str) -> Result:
        if self.index.stats is None:
            raise ConfigError(f"system {self.name} was asked before it ingested the conversation")
        started = time.perf_counter()
        with track_usage() as tally:
            evidence = self.retrieve(question)
            answer, cited = answer_from(question, evidence, self.context)
        latency = time.perf_counter() - started
        return Result(
            items=[ContextEntry.of(item) for item in evidence], context=self.context_text(evidence),
            answer=answer, cited_ids=cited, usage=tally.usage, latency=latency,
        )


class FullContext(_Baseline):
    """The whole conversation as context: the recall ceiling and the token ceiling."""

    name = "full-context"

    def retrieve(self, question: str) -> list[Evidence]:
        return self.index.everything()

    def context_text(self, evidence: list[Evidence]) -> str:
        return self.index.full_context  # built once: the same text every question


class DenseRag(_Baseline):
    """Top-k raw turns by cosine similarity of the run's embedder."""

    name = "dense-rag"

    def __init__(self, index: TurnIndex, k: int) -> None:
        super().__init__(index)
        self.k = k

    def retrieve(self, question: str) -> list[Evidence]:
        return self.index.dense(question, self.k)


class Bm25Rag(_Baseline):
    """Top-k raw turns by Okapi BM25."""

    name = "bm25"

    def __init__(self, index: TurnIndex, k: int) -> None:
        super().__init__(index)
        self.k = k

    def retrieve(self, question: str) -> list[Evidence]:
        return self.index.lexical(question, self.k)


class BudgetRag(_Baseline):
    """The best raw turns of one ranker (dense or BM25), best first, until the token budget is full:
    the same budget, labels and chronological order as the project's context."""

    def __init__(self, index: TurnIndex, ranker: str, budget: int) -> None:
        super().__init__(index)
        self.name = f"{ranker}@budget"
        self.ranker = ranker
        self.budget = budget

    def retrieve(self, question: str) -> list[Evidence]:
        from strata.agents.budget import chronological, select

        rank = self.index.dense if self.ranker == "dense" else self.index.lexical
        return chronological(select(rank(question, len(self.index.records)), self.budget))
