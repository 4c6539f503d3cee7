"""The LoCoMo harness: ingest each conversation, ask every question of every system, score.

One run compares the project, its baselines and its ablations on the same
conversations, embedder and chat model (or offline). Each finished
conversation is cached in the output folder with the configuration it was run
under, so an interrupted run picks up where it stopped and a finished one is
not redone; the report is always rebuilt from the cached results, so every
figure can be traced back to the per-question rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError
from strata.evaluation.baselines import full_context_text, turn_records
from strata.evaluation.judge_llm import AnswerJudge, Label
from strata.evaluation.metrics import bleu1, evidence_recall, f1_score, is_abstention
from strata.evaluation.systems import IngestStats, Result, RunSettings, StrataSystem, build_systems, check_names
from strata.evaluation.tokens import count_tokens
from strata.memory.embeddings import get_embedder
from strata.memory.errors import InputError
from strata.memory.printable import printable
from tqdm import tqdm

from strata.conversations import ADVERSARIAL_CATEGORY, LoadedConversation, Question, load_conversations, load_questions

CACHE_FOLDER = "conversations"
CACHE_VERSION = 2


class QuestionRow(BaseModel):
    """One system's answer to one question, with every figure derived from it."""

    system: str
    conversation_id: str
    index: int = Field(..., description="Position of the question in its conversation's qa list.")
    question: str
    category: int
    gold: str = Field(..., description="The gold answer (for category 5, the answer the question baits).")
    gold_evidence: list[str]
    answer: str
    cited_ids: list[str]
    context_ids: list[str] = Field(..., description="Record ids in the context, in order.")
    retrieved_ids: list[str] = Field(..., description="Dialogue ids the context covers under the strict rule.")
    recall: float | None
    lenient: float | None
    full: bool | None
    f1: float | None = Field(None, description="Categories 1-4 only.")
    bleu1: float | None = None
    abstained: bool
    judge: Label | None = None
    context_tokens: int
    latency_ms: float = Field(..., description="Question to answer, without embedding the question text itself.")
    question_embedding_ms: float = Field(0.0, description="Embedding the question text: once, shared, untimed above.")
    model_calls: int
    model_tokens: int
    rounds: int = 0


class FileInfo(BaseModel):
    path: str
    sha256: str
    conversations: list[str]


class ConversationResult(BaseModel):
    """Everything measured on one conversation: cached as soon as it is finished."""

    version: int = CACHE_VERSION
    config_key: str
    conversation_id: str
    file: str
    sessions: int
    turns: int
    questions: int
    full_context_tokens: int
    ingest: dict[str, IngestStats]
    rows: list[QuestionRow]
    seconds: float


class HarnessOptions(BaseModel):
    """Everything a run is configured with (validated from the command line)."""

    files: list[str] = Field(..., min_length=1)
    out: str
    systems: list[str]
    model: str = ""
    base_url: str = ""
    judge_model: str = ""
    embedder: str = "local:all-MiniLM-L6-v2"
    top_k: int = Field(10, ge=1)
    questions: int | None = Field(None, ge=1, description="Ask only the first N questions of each conversation.")
    seed: int = 0
    fresh: bool = False
    quiet: bool = False


class LoadedFile(BaseModel):
    info: FileInfo
    conversations: list[LoadedConversation]
    questions: dict[str, list[Question]]


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_files(paths: Sequence[str]) -> list[LoadedFile]:
    """Read every file before any work starts, so a bad file fails the run at once."""
    loaded: list[LoadedFile] = []
    seen: dict[str, str] = {}
    for path in paths:
        conversations = load_conversations(path)
        questions: dict[str, list[Question]] = {}
        for question in load_questions(path):
            questions.setdefault(question.conversation_id, []).append(question)
        for conversation in conversations:
            cid = conversation.conversation_id
            if cid in seen:
                raise InputError(
                    f"conversation {cid!r} is in both {seen[cid]} and {path}: give each conversation once"
                )
            seen[cid] = path
        loaded.append(
            LoadedFile(
                info=FileInfo(
                    path=str(path), sha256=sha256_of(path), conversations=[c.conversation_id for c in conversations]
                ),
                conversations=conversations,
                questions=questions,
            )
        )
    return loaded


def config_key(options: HarnessOptions, sha256: str) -> str:
    """What a cached conversation must match to be reused: systems, model, embedder, limits, data."""
    settings = options.model_dump(include={"systems", "model", "base_url", "judge_model", "embedder", "top_k",
                                           "questions", "seed"})
    return hashlib.sha256(json.dumps([settings, sha256, CACHE_VERSION], sort_keys=True).encode()).hexdigest()[:16]


def cache_path(out: Path, conversation_id: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", conversation_id)
    return out / CACHE_FOLDER / f"{slug}.json"


def read_cache(path: Path, key: str) -> ConversationResult | None:
    """A finished conversation's results, if they were made under the same configuration."""
    if not path.exists():
        return None
    try:
        result = ConversationResult.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValidationError, ValueError, OSError):
        return None  # a half-written or older cache is simply redone
    return result if result.config_key == key else None


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def seed_everything(seed: int) -> None:
    """Offline runs are deterministic anyway; seeding keeps any sampling repeatable too."""
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch ships with the embedder
        pass


class _Counter:
    """Token counts, cached for texts seen before (the full context is the same every question)."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()
        if digest not in self._cache:
            self._cache[digest] = count_tokens(text)
        return self._cache[digest]


def score(
    system: str, question: Question, index: int, result: Result, tokens: int, judge: AnswerJudge | None,
    embedding_ms: float = 0.0,
) -> QuestionRow:
    """The per-question figures of one system's result."""
    coverage = evidence_recall(question.evidence, [item.metric_item() for item in result.items])
    strict_ids = [i for item in result.items if item.kind in ("raw", "fact")
                  for i in dict.fromkeys([item.dialogue_id, *item.source_ids]) if i]
    answerable = question.category != ADVERSARIAL_CATEGORY
    return QuestionRow(
        system=system, conversation_id=question.conversation_id, index=index, question=question.question,
        category=question.category, gold=question.answer, gold_evidence=list(question.evidence),
        answer=result.answer, cited_ids=result.cited_ids, context_ids=[item.id for item in result.items],
        retrieved_ids=list(dict.fromkeys(strict_ids)),
        recall=coverage.recall if coverage else None, lenient=coverage.lenient if coverage else None,
        full=coverage.full if coverage else None,
        f1=f1_score(result.answer, question.answer) if answerable else None,
        bleu1=bleu1(result.answer, question.answer) if answerable else None,
        abstained=is_abstention(result.answer),
        judge=judge.grade(question.question, question.answer, result.answer) if judge and answerable else None,
        context_tokens=tokens, latency_ms=result.latency * 1000.0, model_calls=result.usage.calls,
        model_tokens=result.usage.tokens, rounds=result.rounds, question_embedding_ms=embedding_ms,
    )


def embed_question(question: str, embedder: str) -> float:
    """Embed the question once before any system is timed; milliseconds taken.

    The embedder caches by text, so otherwise whichever system asks first
    would pay for embedding the question and the others would not.
    """
    started = time.perf_counter()
    get_embedder(embedder).prefetch([question])
    return (time.perf_counter() - started) * 1000.0


def evaluate_conversation(
    conversation: LoadedConversation, questions: list[Question], options: HarnessOptions, key: str, file: str,
    judge: AnswerJudge | None, count: Callable[[str], int],
) -> ConversationResult:
    """Ingest once per distinct ingest, then ask every question of every system (systems interleaved)."""
    started = time.perf_counter()
    settings = RunSettings(
        data_dir=str(Path(options.out) / "store"), model=options.model, base_url=options.base_url,
        embedder=options.embedder, top_k=options.top_k,
    )
    systems = build_systems(options.systems, conversation.conversation_id, settings)
    cid = conversation.conversation_id
    ingest: dict[str, IngestStats] = {}
    for system in systems:
        with tqdm(total=conversation.turn_count(), desc=f"{cid} ingest {system.name}", unit="turn",
                  leave=False, disable=options.quiet) as bar:
            if isinstance(system, StrataSystem):
                system.on_turn = lambda bar=bar: bar.update(1)
            ingest[system.name] = system.ingest(conversation)
            bar.update(bar.total - bar.n)
    asked = questions[: options.questions] if options.questions else questions
    rows: list[QuestionRow] = []
    with tqdm(total=len(asked) * len(systems), desc=f"{cid} questions", unit="answer", leave=False,
              disable=options.quiet) as bar:
        for index, question in enumerate(asked):
            embedding_ms = embed_question(question.question, settings.embedder)
            for system in systems:
                result = system.answer(question.question)
                tokens = count(result.context)
                rows.append(score(system.name, question, index, result, tokens, judge, embedding_ms))
                bar.update(1)
    return ConversationResult(
        config_key=key, conversation_id=cid, file=file, sessions=len(conversation.sessions),
        turns=conversation.turn_count(), questions=len(asked),
        full_context_tokens=count(full_context_text(turn_records(conversation))),
        ingest=ingest, rows=rows, seconds=time.perf_counter() - started,
    )


def run(options: HarnessOptions, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The whole evaluation: cached conversations are reused, the others run, then the report is written."""
    from strata.evaluation.report import build_config, write_report

    options = options.model_copy(update={"systems": check_names(options.systems)})
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(options.seed)
    files = load_files(options.files)
    judge = AnswerJudge.configured(options.judge_model or options.model, options.base_url)
    count = _Counter()
    results: list[ConversationResult] = []
    reused: list[str] = []
    started = time.perf_counter()
    work = [(f, c) for f in files for c in f.conversations]
    for loaded, conversation in tqdm(work, desc="conversations", unit="conv", disable=options.quiet):
        key = config_key(options, loaded.info.sha256)
        path = cache_path(out, conversation.conversation_id)
        cached = None if options.fresh else read_cache(path, key)
        if cached is not None:
            results.append(cached)
            reused.append(conversation.conversation_id)
            continue
        questions = loaded.questions.get(conversation.conversation_id, [])
        result = evaluate_conversation(conversation, questions, options, key, loaded.info.path, judge, count)
        write_atomically(path, result.model_dump_json())
        results.append(result)
    config = build_config(options, [f.info for f in files], judge, argv)
    config["reused_conversations"] = reused
    config["wall_seconds"] = time.perf_counter() - started
    return write_report(out, config, results, options.systems)


def ensure_offline_embedder(embedder: str) -> None:
    """The local embedder must not reach for the network at run time."""
    if embedder.startswith("local:"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _parse(argv: Sequence[str]) -> HarnessOptions:
    import argparse

    from strata.evaluation.systems import ALL_SYSTEMS

    parser = argparse.ArgumentParser(
        prog="python -m strata.evaluation",
        description="Evaluate strata, its baselines and its ablations on LoCoMo-format conversation files.",
    )
    parser.add_argument("files", nargs="+", help="LoCoMo conversation files (one conversation, or a locomo10 list)")
    parser.add_argument("--out", default="runs/eval", help="output folder (results, cache, stores); default runs/eval")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                        help=f"comma-separated systems (default all): {', '.join(ALL_SYSTEMS)}")
    parser.add_argument("--model", default=os.environ.get("STRATA_MODEL", ""),
                        help="chat model provider:model for every system (default offline)")
    parser.add_argument("--base-url", default=os.environ.get("STRATA_BASE_URL", ""),
                        help="base URL of an OpenAI-compatible server")
    parser.add_argument("--judge-model", default="", help="chat model of the LLM judge (default: --model)")
    parser.add_argument("--embedder", default=os.environ.get("STRATA_EMBEDDER") or "local:all-MiniLM-L6-v2",
                        help="embedder for every system")
    parser.add_argument("--top-k", type=int, default=10, help="k of the dense and BM25 baselines (default 10)")
    parser.add_argument("--questions", type=int, default=None, help="ask only the first N questions per conversation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="redo conversations even if cached")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(list(argv))
    try:
        return HarnessOptions(
            files=args.files, out=args.out, systems=[s.strip() for s in args.systems.split(",") if s.strip()],
            model=args.model, base_url=args.base_url, judge_model=args.judge_model, embedder=args.embedder,
            top_k=args.top_k, questions=args.questions, seed=args.seed, fresh=args.fresh, quiet=args.quiet,
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = "--" + ".".join(str(p) for p in first["loc"]).replace("_", "-")
        raise InputError(f"{where}: {first['msg']}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m strata.evaluation` and `strata eval`: run, print the table, return an exit code."""
    import sys

    from strata.memory.errors import StrataError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        options = _parse(args)
        ensure_offline_embedder(options.embedder)
        report = run(options, args)
    except StrataError as error:
        print(printable(f"error: {error}"), file=sys.stderr)  # a file name or a value from it may hold ESC
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished conversations are cached; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(printable(report["markdown"]))
    print(printable(f"\nwrote {', '.join(report['files'].values())}"))
    return 0

