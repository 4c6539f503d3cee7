"""`strata demo`: build a memory from a conversation, then check it against gold questions.

The turns are stored through the same path as `strata ingest`, which reads only
speakers, dia_ids, texts, photo captions and session dates. The gold questions
are read by a separate loader and used only to score: each answer's evidence
ids are compared with the turns the benchmark marks as the evidence (the
strict rule of the evaluation: a raw turn, or a fact derived from it, counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.resources import files

from pydantic import BaseModel

from strata.api import Answer, Memory
from strata.conversations import ADVERSARIAL_CATEGORY, LoadedConversation, Question
from strata.evaluation.metrics import evidence_recall
from strata.ingestion import IngestSummary, ingest_conversation

# The small conversation shipped inside the package (package data, so an installed wheel has it too), with gold
# questions. `importlib.resources.as_file(SAMPLE_CONVERSATION)` gives it as a file wherever strata is installed.
SAMPLE_CONVERSATION = files("strata") / "data" / "sample_conversation.json"
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


class DemoResult(BaseModel):
    """One gold question, our answer, and whether the gold evidence reached the answer's context."""

    question: str
    category: int
    gold_answer: str
    answer: str | None
    evidence_ids: list[str]
    gold_evidence: list[str]
    reached: list[str]
    seconds: float

    @property
    def recall(self) -> float:
        return len(self.reached) / len(self.gold_evidence) if self.gold_evidence else 0.0


def pick_questions(questions: list[Question], count: int) -> list[Question]:
    """`count` answerable questions with gold evidence, taking the categories in turn.

    Round-robin over multi-hop, temporal, open-domain and single-hop keeps a
    short demo from showing only the easiest kind; file order within a category.
    """
    by_category: dict[int, list[Question]] = {}
    for question in questions:
        if question.category != ADVERSARIAL_CATEGORY and question.evidence:
            by_category.setdefault(question.category, []).append(question)
    queues = [by_category[c] for c in sorted(by_category)]
    picked: list[Question] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            if queue and len(picked) < count:
                picked.append(queue.pop(0))
    return picked


def score(question: Question, answer: Answer, seconds: float) -> DemoResult:
    coverage = evidence_recall(
        question.evidence, [(item.kind, item.dialogue_id, item.source_ids) for item in answer.evidence]
    )
    return DemoResult(
        question=question.question, category=question.category, gold_answer=question.answer, answer=answer.answer,
        evidence_ids=answer.evidence_ids(), gold_evidence=list(question.evidence),
        reached=list(coverage.reached) if coverage else [], seconds=seconds,
    )


def describe(index: int, total: int, result: DemoResult) -> str:
    """One question's block of the demo's output."""
    kind = CATEGORY_NAMES.get(result.category, f"category {result.category}")
    shown = ", ".join(result.evidence_ids[:12]) + (" ..." if len(result.evidence_ids) > 12 else "")
    verdict = "yes" if result.recall == 1.0 else ("partly" if result.reached else "no")
    return "\n".join([
        f"[{index}/{total}] ({kind}) {result.question}",
        f"  gold answer:     {result.gold_answer}",
        f"  our answer:      {result.answer if result.answer is not None else '(none)'}",
        f"  evidence ids:    ({len(result.evidence_ids)} turns) {shown or '(none)'}",
        f"  gold evidence:   {', '.join(result.gold_evidence)}",
        f"  gold reached:    {verdict} ({len(result.reached)}/{len(result.gold_evidence)})"
        f" in {result.seconds * 1000:.0f} ms",
    ])


def run_demo(
    memory: Memory, conversation: LoadedConversation, questions: list[Question], count: int,
    emit: Callable[[str], None], on_turn: Callable[[], None] | None = None,
) -> tuple[IngestSummary, list[DemoResult]]:
    """Ingest the conversation, then answer `count` of its gold questions and score their evidence."""
    summary = ingest_conversation(memory, conversation, on_turn=on_turn)
    emit(summary.line())
    chosen = pick_questions(questions, count)
    results: list[DemoResult] = []
    for index, question in enumerate(chosen, start=1):
        started = time.perf_counter()
        answer = memory.ask(question.question)
        results.append(score(question, answer, time.perf_counter() - started))
        emit("")
        emit(describe(index, len(chosen), results[-1]))
    if results:
        full = sum(r.recall == 1.0 for r in results)
        mean = sum(r.recall for r in results) / len(results)
        emit("")
        emit(f"gold evidence fully reached for {full}/{len(results)} questions (mean evidence recall {mean:.2f})")
    return summary, results
