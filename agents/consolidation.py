"""The Memory role's slow path: consolidation outside the per-turn graph (MAGMA 3.4).

`strata consolidate`, `Memory.consolidate()` or a scheduler call `run`; ingestion
never waits on it. It picks the policies (the chat model's prompts when a model
is configured, else the offline rules) and hands them to
`memory.graph.consolidation`, which does the work and owns its durability.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.agents.common import OFFLINE, model_policy_name
from strata.agents.llm import ask_json, chat_model
from strata.agents.wire import UNAVAILABLE, new_unit
from strata.graph.context import Context
from strata.memory.graph import causal
from strata.memory.graph.consolidation import CausalPolicy, ConsolidationReport, SummaryPolicy, consolidate
from strata.memory.graph.replies import ModelCausal, ModelSummary, collected
from strata.memory.graph.summaries import Group
from strata.memory.records import Record
from strata.memory.store import MemoryStore
from strata.prompts import graph as prompts

NEIGHBOURHOOD = 6  # earlier turns shown with each turn the model looks at


def run(store: MemoryStore, context: Context, limit: int | None = None) -> ConsolidationReport:
    """Consolidate what the fast path has filed since the last run; return counts, cost and policy."""
    model = chat_model(context)
    causal_policy: CausalPolicy | None = None
    summary_policy: SummaryPolicy | None = None
    policy = OFFLINE
    failures: list[str] = []
    fallbacks: dict[str, str] = {}  # summary id -> the label of the offline text told instead of the model's
    retry: set[str] = set()  # turns and summaries told offline while the model could not be reached
    if model is not None:
        policy = model_policy_name(context)
        causal_policy = model_causal_policy(store, context, failures, retry)
        summary_policy = model_summary_policy(context, failures, fallbacks, retry)
    with collected() as cuts:  # what the limits cut from the model's replies (memory/graph/replies.py)
        report = consolidate(
            store, causal_on=context.causal_links, entities_on=context.entity_graph, summaries_on=context.summaries,
            causal_policy=causal_policy, summary_policy=summary_policy, policy=policy, limit=limit,
            semantic_on=context.semantic_links, fallbacks=fallbacks, retry=retry,
        )
    if failures:
        report.policy = f"{policy}; offline for {len(failures)} unusable replies (first: {failures[0]})"
    if cuts:
        report.policy += f"; the limits cut {len(cuts)} part(s) of the model's replies (first: {cuts[0]})"
    return report


def model_causal_policy(
    store: MemoryStore, context: Context, failures: list[str], retry: set[str] | None = None
) -> CausalPolicy:
    """The causal prompt over a turn and the turns before it; the cue rule when the reply is unusable (the
    turn put in `retry` when the model could not be reached: a later run asks again)."""
    offline = None
    model = chat_model(context)
    assert model is not None

    def policy(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        nonlocal offline
        if not causal.cues(record.text):
            return []  # MAGMA infers causes where the events call for it; a turn with no cue word is left alone
        shown = [*earlier[-NEIGHBOURHOOD:], record]
        lines = "\n".join(f"[{r.id}] {r.speaker}: {r.text}" for r in shown)
        new_unit(context)  # `max_model_calls` per turn, not per run
        parsed, problem, _ = ask_json(model, prompts.CAUSAL_SYSTEM, prompts.CAUSAL_USER.format(turns=lines),
                                      ModelCausal, context)
        if parsed is None:
            failures.append(problem)
            if retry is not None and problem.startswith(UNAVAILABLE):
                retry.add(record.id)
            if offline is None:
                from strata.memory.graph.consolidation import offline_causal

                offline = offline_causal(store)
            return offline(record, earlier)
        ids = {r.id for r in shown}
        return [
            causal.CausalLink(cause=link.cause, effect=link.effect, weight=max(0.01, link.confidence),
                              reason=link.reason or "model")
            for link in parsed.links
            if link.cause in ids and link.effect in ids and link.cause != link.effect and link.confidence > 0
        ]

    return policy


def model_summary_policy(
    context: Context, failures: list[str], fallbacks: dict[str, str] | None = None, retry: set[str] | None = None
) -> SummaryPolicy:
    """The merge prompt over a group's turns; None (the offline text) when the reply is unusable, with the
    fallback's label, which says why, put in `fallbacks` under the group's id for the summary to keep (and
    the group in `retry` when the model could not be reached: a later run tells it again)."""
    model = chat_model(context)
    assert model is not None

    def policy(group: Group, members: Sequence[Record], offline_text: str) -> tuple[str, str] | None:
        lines = "\n".join(
            f"[{r.dialogue_id}] {r.said_on()} {r.speaker}: {r.text}"
            for r in members
        )
        new_unit(context)  # `max_model_calls` per group, not per run
        parsed, problem, label = ask_json(
            model, prompts.SUMMARY_SYSTEM, prompts.SUMMARY_USER.format(heading=group.heading, turns=lines),
            ModelSummary, context,
        )
        if parsed is None:
            failures.append(problem)
            if fallbacks is not None:
                fallbacks[group.id] = label
            if retry is not None and problem.startswith(UNAVAILABLE):
                retry.add(group.id)
            return None
        return parsed.title, parsed.content

    return policy
