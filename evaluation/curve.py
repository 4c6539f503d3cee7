"""Evidence recall against the context budget, per category, with ablations and leave-conversations-out.

Retrieval only (no answers are written, so no chat model is needed): each
conversation is ingested and consolidated (the slow path: causal links,
summaries) once per set of write-side switches into `<ingest-cache>/<set>/`
(`all` with every mechanism on, `no-summaries` with summaries off at ingest and
at read time, ...), kept so a second run only asks; read-side switches share
the `all` ingest. Then every question of categories 1-4 is retrieved
- by strata (the full read path: research, judge filter, retries) and by dense,
  BM25 and their reciprocal-rank hybrid over raw turns, each filled to the
  same budget, at every budget of `--budgets`;
- by strata with one mechanism switched off (a `Context` switch), at
  `--ablation-budget`;
- by strata with each value of a constant given with `--tune MODULE.NAME=v1,v2`,
  at `--ablation-budget`: the value is chosen on three conversations and scored
  on the other two, rotating over the five pairs (leave-conversations-out), so
  the table shows what tuning gains where it was tuned and where it was not.

Evidence recall is strict (a gold turn's raw text, or a fact derived from it, is
in the context) with a lenient column beside it (an episode, summary or trait
citing the turn counts too), and an `answer words` column: the share of the
gold answer's words found in the context, which shows a ranking or rendering
that keeps a turn's id but drops what answers. Rows are cached in
`<out>/rows.jsonl` as they are measured, so an interrupted run resumes;
`report.md` and `curve.png` are rebuilt from the rows every time.

    python -m strata.evaluation.curve ../shared/data/locomo/conv-*.json --out runs/curve [--questions N]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field
from strata.evaluation.baselines import TurnIndex
from strata.evaluation.metrics import ContextItem, answer_words_found, evidence_recall
from strata.evaluation.systems import RunSettings
from strata.evaluation.tokens import count_tokens
from strata.graph.context import Context
from strata.graph.state import Evidence
from strata.memory.bm25 import reciprocal_rank_fusion
from strata.memory.errors import InputError, StrataError
from strata.memory.printable import printable

from strata.api import Memory
from strata.conversations import LoadedConversation, Question, load_questions, load_turns
from strata.ingestion import ingest_conversation

BUDGETS = (500, 1000, 1500, 2000, 3000)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BASELINES = ("dense", "bm25", "hybrid")
# ablation row -> the Context switch it turns off (graph mechanisms: this module's and the write side's)
ABLATIONS = {
    "no entity graph": "entity_graph",
    "no semantic links": "semantic_links",
    "no causal links": "causal_links",
    "no summaries": "summaries",
    "no traversal": "traversal",
    "no Judge filter": "judge_filter",
    "no brief turns": "brief_turns",
}
# switches that change what ingest and consolidation write: their ablations need their own ingest
WRITE_SWITCHES = frozenset({"entity_graph", "semantic_links", "causal_links", "summaries"})
READY = "ready.json"  # written in a conversation's cache folder once its ingest and consolidation finished


class Row(BaseModel):
    """One system's context for one question."""

    system: str
    setting: str = Field("", description="budget=..., an ablation, or a tuned constant's value")
    conversation: str
    index: int
    category: int
    recall: float
    lenient: float
    tokens: int
    ms: float
    answer_words: float | None = Field(None, description="share of the gold answer's words in the context")


def ingest_set(off: frozenset[str]) -> str:
    """The cache folder's name for a set of write-side switches turned off."""
    return "all" if not off else "no-" + "+".join(sorted(off))


def context_switches() -> set[str]:
    return {f.name for f in fields(Context) if isinstance(f.default, bool)}


def tokens_of(evidence: Sequence[Evidence]) -> int:
    """cl100k tokens of the context as the Working role reads it: its lines joined, as the main harness counts
    (the budget's own count, a line's tokens plus one for its newline, is a little higher: it is what packs)."""
    from strata.agents.budget import chronological
    from strata.agents.common import format_evidence

    return count_tokens(format_evidence(chronological(evidence))) if evidence else 0


def context_text(evidence: Sequence[Evidence]) -> str:
    from strata.agents.budget import chronological
    from strata.agents.common import format_evidence

    return format_evidence(chronological(evidence))


def scored(question: Question, evidence: Sequence[Evidence]) -> tuple[float, float] | None:
    coverage = evidence_recall(
        question.evidence, [ContextItem(e.kind, e.dialogue_id, tuple(e.source_ids)) for e in evidence]
    )
    return None if coverage is None else (coverage.recall, coverage.lenient)


class Run:
    """One output folder: the cached rows and what is still to measure; memories come from the ingest cache."""

    def __init__(self, out: Path, ingest_cache: str = "") -> None:
        self.out = out
        self.cache = Path(ingest_cache) if ingest_cache else out / "ingest"
        self.rows_path = out / "rows.jsonl"
        out.mkdir(parents=True, exist_ok=True)
        self.done: set[tuple[str, str, str, int]] = set()
        if self.rows_path.is_file():
            for line in self.rows_path.read_text().splitlines():
                row = Row.model_validate_json(line)
                self.done.add((row.system, row.setting, row.conversation, row.index))

    def rows(self) -> list[Row]:
        if not self.rows_path.is_file():
            return []
        return [Row.model_validate_json(line) for line in self.rows_path.read_text().splitlines()]

    def memory_dir(self, conversation: str, off: frozenset[str] = frozenset()) -> Path:
        """The folder one conversation is ingested into with these write-side switches off."""
        return self.cache / ingest_set(off) / conversation

    def memory(self, conversation: LoadedConversation, off: frozenset[str] = frozenset(), **settings: Any) -> Memory:
        """A conversation's memory ingested and consolidated with `off` switched off (ingested on first use)."""
        folder = self.memory_dir(conversation.conversation_id, off)
        switches = {name: False for name in off}
        if not (folder / READY).is_file():
            started = time.perf_counter()
            writer = Memory(conversation.conversation_id, data_dir=str(folder), **switches)
            ingest_conversation(writer, conversation)  # resumes: turns already stored are skipped
            ingested = time.perf_counter() - started
            report = writer.consolidate()
            consolidated = time.perf_counter() - started - ingested
            (folder / READY).write_text(json.dumps({
                "ingest_s": round(ingested, 1), "consolidate_s": round(consolidated, 1),
                "off": sorted(off), "consolidation": report.model_dump(mode="json"),
            }, indent=1))
            print(printable(f"{conversation.conversation_id} [{ingest_set(off)}]: ingested in {ingested:.0f} s, "
                            f"consolidated in {consolidated:.0f} s"), flush=True)
            del writer
        return Memory(conversation.conversation_id, data_dir=str(folder), **{**switches, **settings})

    def measure(
        self, system: str, setting: str, conversation: str, questions: Sequence[tuple[int, Question]],
        retrieve: Callable[[str], Sequence[Evidence]],
    ) -> None:
        todo = [(i, q) for i, q in questions if (system, setting, conversation, i) not in self.done]
        if not todo:
            return
        with self.rows_path.open("a") as handle:
            for index, question in todo:
                started = time.perf_counter()
                evidence = retrieve(question.question)
                elapsed = (time.perf_counter() - started) * 1000
                score = scored(question, evidence)
                if score is None:
                    continue
                words = answer_words_found(question.answer, context_text(evidence))
                row = Row(system=system, setting=setting, conversation=conversation, index=index,
                          category=question.category, recall=score[0], lenient=score[1],
                          tokens=tokens_of(evidence), ms=round(elapsed, 1), answer_words=words)
                handle.write(row.model_dump_json() + "\n")
                self.done.add((system, setting, conversation, index))
        print(printable(f"  {conversation} {system} {setting}: {len(todo)} questions"), flush=True)


def baseline_retriever(index: TurnIndex, kind: str, budget: int) -> Callable[[str], list[Evidence]]:
    """One ranker over the raw turns (dense, BM25, or both fused by reciprocal rank), filled to the budget."""
    from strata.agents.budget import chronological, select

    def ranked(question: str) -> list[Evidence]:
        every = len(index.records)
        if kind == "dense":
            return index.dense(question, every)
        if kind == "bm25":
            return index.lexical(question, every)
        dense, lexical = index.dense(question, every), index.lexical(question, every)
        by_id = {e.id: e for e in [*dense, *lexical]}
        fused = reciprocal_rank_fusion([[e.id for e in dense], [e.id for e in lexical]])
        return [by_id[i] for i, _ in fused]

    return lambda question: chronological(select(ranked(question), budget))


def tunable(target: str) -> tuple[ModuleType, str]:
    """MODULE.NAME as the module and the constant's name; InputError when either does not exist."""
    module_name, _, name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise InputError(f"--tune {target}: no module {module_name} (e.g. strata.agents.research)") from None
    if not hasattr(module, name):
        raise InputError(f"--tune {target}: {module_name} has no constant {name}")
    return module, name


def set_constant(spec: str, value: float) -> Callable[[], None]:
    """Set MODULE.NAME to value; returns the undo. A whole-number constant takes whole values only (7.5 ran as
    7 under the label 7.5)."""
    module, name = tunable(spec)
    old = getattr(module, name)
    if isinstance(old, int) and value != int(value):
        raise InputError(f"--tune {spec}: {name} is a whole number ({old}): give whole values, not {value:g}")
    setattr(module, name, type(old)(value))
    return lambda: setattr(module, name, old)


def code_value(spec: str) -> str:
    """The constant's value in the code, labelled as the tuned rows are (`NAME=<value:g>`)."""
    module, name = tunable(spec)
    return f"{getattr(module, name):g}"


def evaluate(options: argparse.Namespace) -> Run:
    run = Run(Path(options.out), options.ingest_cache)
    switches = context_switches()
    for file in options.files:
        conversation = load_turns(file)
        name = conversation.conversation_id
        questions = [(i, q) for i, q in enumerate(load_questions(file)) if q.category in CATEGORIES and q.evidence]
        questions = questions[: options.questions] if options.questions else questions
        run.memory(conversation)
        index = TurnIndex(RunSettings(data_dir=str(run.memory_dir(name))))
        index.ensure(conversation, "baselines")
        for budget in options.budgets:
            setting = f"budget={budget}"
            strata = run.memory(conversation, token_budget=budget)
            run.measure("strata", setting, name, questions, lambda q, m=strata: m.retrieve(q).evidence)
            for kind in BASELINES:
                run.measure(kind, setting, name, questions, baseline_retriever(index, kind, budget))
        for label, switch in ABLATIONS.items():
            if switch not in switches or (options.ablations and switch not in options.ablations):
                continue
            off = frozenset({switch}) & WRITE_SWITCHES
            ablated = run.memory(conversation, off, token_budget=options.ablation_budget, **{switch: False})
            run.measure("strata", label, name, questions, lambda q, m=ablated: m.retrieve(q).evidence)
        for target, values in options.tune:
            for value in values:
                undo = set_constant(target, value)
                try:
                    tuned = run.memory(conversation, token_budget=options.ablation_budget)
                    run.measure("strata", f"{target}={value:g}", name, questions,
                                lambda q, m=tuned: m.retrieve(q).evidence)
                finally:
                    undo()
    return run


# --- the report ----------------------------------------------------------------------------------
def mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else float("nan")


def summary(rows: Sequence[Row]) -> dict[str, float]:
    out = {"recall": mean(r.recall for r in rows), "lenient": mean(r.lenient for r in rows),
           "tokens": mean(r.tokens for r in rows), "n": float(len(rows)),
           "answer_words": mean(r.answer_words for r in rows if r.answer_words is not None)}
    for category in CATEGORIES:
        out[f"cat{category}"] = mean(r.recall for r in rows if r.category == category)
    out["p50_ms"] = sorted(r.ms for r in rows)[len(rows) // 2] if rows else float("nan")
    return out


def grouped(rows: Sequence[Row]) -> dict[tuple[str, str], list[Row]]:
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row.system, row.setting)].append(row)
    return groups


def leave_out(
    rows: Sequence[Row], conversations: Sequence[str], defaults: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Per tuned constant and rotation: the value best on three conversations, scored on the other two, beside
    the code's value (`defaults`, by constant) scored on the same two: their difference is what the choice
    gains on conversations it was not made on (recall where tuned minus held out mostly says which
    conversations are harder). Ties go to the code's value, then to the smaller value."""
    defaults = defaults or {}
    tuned: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.system == "strata" and "=" in row.setting and not row.setting.startswith("budget="):
            name, _, value = row.setting.partition("=")
            tuned[name][value].append(row)
    results: list[dict[str, Any]] = []
    ordered = sorted(conversations)
    for name, by_value in tuned.items():
        for start in range(len(ordered)):
            held = {ordered[start], ordered[(start + 1) % len(ordered)]}
            if len(ordered) < 3 or len(held) < 2:
                continue

            def score(value: str, inside: bool, held: set[str] = held, by_value: dict = by_value) -> float:
                return mean(r.recall for r in by_value[value] if (r.conversation in held) != inside)

            code = defaults.get(name)
            best = max(by_value, key=lambda v: (score(v, True), v == code, -float(v)))
            base = score(code, False) if code in by_value else float("nan")
            results.append({"constant": name, "held_out": sorted(held), "chosen": best, "code_value": code,
                            "tune_recall": score(best, True), "held_out_recall": score(best, False),
                            "code_held_out_recall": base, "gain": score(best, False) - base})
    return results


def write_report(run: Run, options: argparse.Namespace) -> str:
    rows = run.rows()
    groups = grouped(rows)
    conversations = sorted({r.conversation for r in rows})
    lines = [f"# Evidence recall against the context budget ({', '.join(conversations)}; categories 1-4)", "",
             f"`{options.command}`", "",
             "| system | budget | tokens/q | recall | lenient | multi-hop | temporal | open-domain | single-hop | "
             "answer words | p50 ms |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for budget in options.budgets:
        for system in ("strata", *BASELINES):
            got = groups.get((system, f"budget={budget}"))
            if got:
                s = summary(got)
                lines.append(f"| {system} | {budget} | {s['tokens']:,.0f} | {s['recall']:.3f} | {s['lenient']:.3f} | "
                             f"{s['cat1']:.3f} | {s['cat2']:.3f} | {s['cat3']:.3f} | {s['cat4']:.3f} | "
                             f"{s['answer_words']:.3f} | {s['p50_ms']:.0f} |")
    lines += ["", f"Ablations at budget {options.ablation_budget} (one switch off each):", "",
              "| row | tokens/q | recall | lenient | multi-hop | temporal | open-domain | single-hop | answer words |",
              "|---|---|---|---|---|---|---|---|---|"]
    base = groups.get(("strata", f"budget={options.ablation_budget}"))
    ablation_rows = [("strata (all on)", base)] + [(label, groups.get(("strata", label))) for label in ABLATIONS]
    switches = context_switches()
    for label, got in ablation_rows:
        if got:
            s = summary(got)
            lines.append(f"| {label} | {s['tokens']:,.0f} | {s['recall']:.3f} | {s['lenient']:.3f} | {s['cat1']:.3f} | "
                         f"{s['cat2']:.3f} | {s['cat3']:.3f} | {s['cat4']:.3f} | {s['answer_words']:.3f} |")
        elif label in ABLATIONS and ABLATIONS[label] not in switches:
            lines.append(f"| {label} | switch `{ABLATIONS[label]}` not in this version | | | | | | | |")
    per_conversation = [f"{c}: {summary([r for r in base if r.conversation == c])['recall']:.3f}"
                        for c in conversations] if base else []
    if per_conversation:
        lines += ["", f"strata at {options.ablation_budget} per conversation: " + ", ".join(per_conversation)]
    rotations = leave_out(rows, conversations, {target: code_value(target) for target, _ in options.tune})
    if rotations:
        lines += ["", "Leave-conversations-out (value chosen on three conversations, scored on the other two; "
                  "gain: the chosen value's held-out recall minus the code's value's on the same two):", "",
                  "| constant | held out | chosen | code's value | recall where tuned | recall held out | "
                  "code's value held out | gain |", "|---|---|---|---|---|---|---|---|"]
        for r in rotations:
            lines.append(f"| {r['constant']} | {', '.join(r['held_out'])} | {r['chosen']} | {r['code_value']} | "
                         f"{r['tune_recall']:.3f} | {r['held_out_recall']:.3f} | {r['code_held_out_recall']:.3f} | "
                         f"{r['gain']:+.3f} |")
        for name in sorted({r["constant"] for r in rotations}):
            mine = [r for r in rotations if r["constant"] == name]
            tuned, held = mean(r["tune_recall"] for r in mine), mean(r["held_out_recall"] for r in mine)
            base, gain = mean(r["code_held_out_recall"] for r in mine), mean(r["gain"] for r in mine)
            lines.append(f"| {name} | mean of {len(mine)} rotations | | | {tuned:.3f} | {held:.3f} | {base:.3f} | "
                         f"{gain:+.3f} |")
    text = "\n".join(lines) + "\n"
    (run.out / "report.md").write_text(text)
    (run.out / "results.json").write_text(json.dumps(
        {f"{k[0]} {k[1]}": summary(v) for k, v in groups.items()} | {"leave_out": rotations}, indent=1))
    draw_curve(groups, options.budgets, run.out / "curve.png")
    return text


def draw_curve(groups: dict[tuple[str, str], list[Row]], budgets: Sequence[int], target: Path) -> None:
    """Recall against mean context tokens, one line per system, overall and per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("all categories", None), *((name, c) for c, name in CATEGORIES.items())]
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), sharey=True)
    for axis, (title, category) in zip(axes, panels, strict=True):
        for system in ("strata", *BASELINES):
            points = []
            for budget in budgets:
                got = groups.get((system, f"budget={budget}"), [])
                chosen = [r for r in got if category is None or r.category == category]
                if chosen:
                    points.append((mean(r.tokens for r in got), mean(r.recall for r in chosen)))
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=system)
        axis.set_title(title)
        axis.set_xlabel("context tokens per question")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("evidence recall (strict)")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(target, dpi=110)
    plt.close(figure)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m strata.evaluation.curve", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="LoCoMo conversation files")
    parser.add_argument("--out", required=True, help="run folder (memory, rows, report, curve)")
    parser.add_argument("--ingest-cache", default="runs/ingest",
                        help="ingested memories, one folder per write-side switch set and conversation (reused)")
    parser.add_argument("--ablations", default="", help="only these switches' ablation rows, comma separated "
                        "(default: all; none: no ablation rows; a write-side one ingests again)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="token budgets, comma separated")
    parser.add_argument("--ablation-budget", type=int, default=Context().token_budget, help="budget of the ablations")
    parser.add_argument("--tune", action="append", default=[], metavar="MODULE.NAME=v1,v2",
                        help="a constant to choose leave-conversations-out")
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions of each conversation")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the cached rows")
    args = parser.parse_args(argv)
    try:
        args.budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--budgets {args.budgets!r}: give whole numbers like 500,1000")
    args.ablations = {a.strip() for a in args.ablations.split(",") if a.strip()}
    unknown = args.ablations - set(ABLATIONS.values()) - {"none"}
    if unknown:
        parser.error(f"--ablations {', '.join(sorted(unknown))}: choose from {', '.join(ABLATIONS.values())}")
    tuned: list[tuple[str, list[float]]] = []
    for spec in args.tune:
        if "=" not in spec or "." not in spec.partition("=")[0]:
            parser.error(f"--tune {spec!r}: write MODULE.NAME=v1,v2 (e.g. strata.memory.search.ANCHORS=5,10)")
        target, _, values = spec.partition("=")
        try:
            tunable(target)
            tuned.append((target, [float(v) for v in values.split(",")]))
            for value in tuned[-1][1]:  # a value the constant cannot take is refused before any ingest
                set_constant(target, value)()
        except InputError as error:
            parser.error(str(error))
        except ValueError:
            parser.error(f"--tune {spec}: give numbers after '=', comma separated")
    args.tune = tuned  # (MODULE.NAME, values), read once here
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    args.command = "python -m strata.evaluation.curve " + " ".join(argv if argv is not None else [])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import sys

    args = parse(list(argv) if argv is not None else sys.argv[1:])
    try:
        run = evaluate(args) if not args.report_only else Run(Path(args.out), args.ingest_cache)
    except StrataError as error:  # e.g. another run holds a cached memory folder
        print(printable(f"error: {' '.join(str(error).split())}"), file=sys.stderr)  # a file name may hold ESC
        return 2
    except KeyboardInterrupt:
        print("interrupted: measured rows are cached; run the same command again to resume", file=sys.stderr)
        return 130
    print(printable(write_report(run, args)))  # it shows the command line as typed
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
