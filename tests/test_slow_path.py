"""The slow path (consolidation) beside what else may run on a memory: an ingest still deriving turns, an
erase, a Refresher update and its undo, a run with a mechanism switched off, and what its report counts.

Real Chroma and MiniLM, offline policies, conv-26's turns. The erase is made to land inside a consolidation
through the policies `consolidate` takes: they are called where it holds no lock, as a model call would be.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from strata.memory.graph import causal, summaries
from strata.memory.graph.consolidation import DIGESTS, DONE, DONE_BY, _densify, consolidate, offline_causal
from strata.memory.journal import PENDING
from strata.memory.records import LinkType, Record
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_turns
from tests.conftest import offline_environment

NAMESPACE = "conv-26"
BASE_TURNS = 40  # ingested once for the file; each test works in its own copy
MORE_TURNS = 15  # the next turns, added by the tests that ingest beside a consolidation


def conv26(locomo_dir: Path, start: int, count: int) -> list[Any]:
    turns = list(load_turns(locomo_dir / "conv-26.json").turns())
    return turns[start:start + count]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Path:
    """conv-26's first BASE_TURNS turns ingested, never consolidated, the folder closed."""
    folder = tmp_path_factory.mktemp("slow_path") / "mem"
    with offline_environment():
        Memory(NAMESPACE, data_dir=str(folder)).add(conv26(locomo_dir, 0, BASE_TURNS))
        close_all()
    return folder


def copy_of(ingested: Path, where: Path) -> Memory:
    shutil.copytree(ingested, where)
    return Memory(NAMESPACE, data_dir=str(where))


def graph_links(memory: Memory) -> set[tuple[str, str, str]]:
    store = memory.store
    ids = [r.id for r in store.timeline()]
    return {(link.src, link.dst, link.type.value)
            for link in store.ledger.neighbours(NAMESPACE, ids, [LinkType.ENTITY, LinkType.CAUSAL])}


def weighted_links(memory: Memory) -> dict[tuple[str, str, str], float]:
    store = memory.store
    ids = [r.id for r in store.timeline()]
    return {(link.src, link.dst, link.type.value): round(link.weight, 4)
            for link in store.ledger.neighbours(NAMESPACE, ids, [LinkType.ENTITY, LinkType.CAUSAL])}


def done_list(memory: Memory) -> list[str]:
    return list(memory.store.ledger.get_state(NAMESPACE, DONE, []) or [])


def erase_in_another_thread(memory: Memory, ids: list[str]) -> None:
    """As another caller would: the erase takes the namespace's write lock on its own."""
    worker = threading.Thread(target=memory.erase, args=(ids,))
    worker.start()
    worker.join()


def test_a_consolidation_beside_an_ingest_leaves_the_turns_still_deriving_to_the_next_run(
    ingested: Path, tmp_path: Path, locomo_dir: Path,
) -> None:
    """Turns an ingest had derived but not yet written (staged) were consolidated without their entity
    mentions, which only the ledger holds once written, and marked done: their entity links never came."""
    more = conv26(locomo_dir, BASE_TURNS, MORE_TURNS)
    reference = copy_of(ingested, tmp_path / "reference")
    reference.add(more)
    reference.consolidate()

    memory = copy_of(ingested, tmp_path / "beside")
    paused, resume = threading.Event(), threading.Event()

    def on_turn(done: int) -> None:
        if done == 8:  # no lock is held between two turns; the turns derived so far are staged
            paused.set()
            resume.wait()

    ingest = threading.Thread(target=memory.add, args=(more,), kwargs={"on_turn": on_turn})
    ingest.start()
    try:
        assert paused.wait(300)
        waiting = set(memory.store.ledger.get_state(NAMESPACE, PENDING, []) or [])
        assert waiting and memory.store.has_staged()
        beside = memory.consolidate()
        assert not waiting & set(done_list(memory)) and beside.turns == BASE_TURNS + 8 - len(waiting & {
            f"raw:{t.dia_id}" for t in more[:8]})
    finally:
        resume.set()
        ingest.join()
    memory.consolidate()
    assert graph_links(memory) == graph_links(reference)
    assert sorted(done_list(memory)) == sorted(done_list(reference))


def test_an_erase_inside_a_consolidation_is_not_written_over(ingested: Path, tmp_path: Path) -> None:
    """The consolidation wrote back its own copies of the consolidated turns and of the summaries' digests,
    taken before the erase: the erased turn came back as done, and the summaries the erase removed were
    never written again (their digests said unchanged)."""
    memory = copy_of(ingested, tmp_path / "causal")
    infer = offline_causal(memory.store)
    calls = 0

    def erasing_causes(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        nonlocal calls
        calls += 1
        if calls == 20:
            erase_in_another_thread(memory, ["raw:D1:5"])
        return infer(record, earlier)

    consolidate(memory.store, causal_policy=erasing_causes)
    assert calls >= 20 and not memory.store.has("raw:D1:5")
    assert set(done_list(memory)) == {r.id for r in memory.store.timeline()}

    memory = copy_of(ingested, tmp_path / "summaries")
    first = consolidate(memory.store)
    assert first.summaries > 3
    store = memory.store
    store.ledger.set_state(NAMESPACE, DIGESTS, {})  # every summary to be written again, as after an upgrade
    told: list[str] = []
    gone: list[str] = []

    def erasing_summaries(group: Any, members: Sequence[Record], text: str) -> None:
        told.append(group.id)
        if len(told) == 3:  # a turn two summaries not yet rewritten cite
            cited = {i: r.source_ids for i, r in store.active("summary").items() if i not in told}
            turn = next(d for ids in cited.values() for d in ids
                        if sum(d in other for other in cited.values()) >= 2)
            gone.extend(i for i, ids in cited.items() if turn in ids)
            erase_in_another_thread(memory, [f"raw:{turn}"])
        return None  # the offline text

    consolidate(memory.store, summary_policy=erasing_summaries)
    assert gone and not set(gone) & set(store.active("summary"))
    assert set(store.ledger.get_state(NAMESPACE, DIGESTS, {}) or {}) == set(store.active("summary"))
    again = memory.consolidate()  # the groups that stay are written anew
    assert again.summaries >= 1 and again.summaries_unchanged == len(store.active("summary")) - again.summaries


def test_a_summary_is_told_again_when_its_facts_change_and_when_the_change_is_undone(data_dir: Path) -> None:
    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "I live in Denver and I work as a nurse at the city hospital.",
                 "time": "2023-05-01T10:00"},
                {"speaker": "Bob", "text": "Cool, I work as a teacher.", "time": "2023-05-01T10:01"}])
    memory.consolidate()

    def summaries_of_ann() -> list[str]:
        return [r.text for r in memory.store.all("summary") if r.participant == "Ann"]

    assert summaries_of_ann() and all("Denver" in text for text in summaries_of_ann())
    memory.chat("Actually I live in Boulder now.", speaker="Ann")
    assert memory.consolidate().summaries >= 1
    # the superseded Denver fact is told by no summary (it still says what T1 said, so none tells it as Boulder)
    assert all("Denver" not in text for text in summaries_of_ann())
    assert any("Boulder" in text for text in summaries_of_ann())
    memory.undo()
    assert memory.consolidate().summaries >= 1
    assert all("lives in Denver" in text for text in summaries_of_ann())


def test_entity_densification_keeps_the_latest_partners_in_time_not_in_id_order(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sorted as text, raw:T10 came before raw:T2: the partners kept were not the latest."""
    monkeypatch.setattr("strata.memory.graph.consolidation.MAX_PAIRS_PER_ENTITY", 2)
    memory = Memory("ann", data_dir=str(data_dir))
    mentions = {2, 5, 9, 10}
    memory.add([{"speaker": "Ann", "dia_id": f"T{n}", "time": f"2023-05-{n:02d}T10:00",
                 "text": f"My cat Miso chased a moth on day {n}." if n in mentions
                 else f"I planted {n} tulip bulbs in the back garden today."} for n in range(1, 13)])
    store = memory.store
    timeline = [r for r in store.timeline() if r.context]
    order = {r.id: i for i, r in enumerate(timeline)}
    found = _densify(store, [r for r in timeline if r.id == "raw:T2"], order)
    assert {(link.src, link.dst) for link in found} == {("raw:T9", "raw:T2"), ("raw:T10", "raw:T2")}


def test_a_run_with_a_mechanism_off_keeps_its_own_list_and_the_report_counts_new_links(
    ingested: Path, tmp_path: Path,
) -> None:
    """A run with entity links off marked its turns done for good: the entity links never came. And the
    report counted every link found again (the fast path's included) as written."""
    off = copy_of(ingested, tmp_path / "off")
    without_entities = Memory(NAMESPACE, data_dir=str(tmp_path / "off"), entity_graph=False)
    first, second = without_entities.consolidate(limit=10), without_entities.consolidate(limit=10)
    assert (first.turns, second.turns, first.entity) == (10, 10, 0)  # a limited ablation moves on
    assert done_list(off) == [] and len(off.store.ledger.get_state(NAMESPACE, DONE_BY["causal"], [])) == 20
    before = off.store.ledger.count_links(NAMESPACE)
    full = off.consolidate()
    after = off.store.ledger.count_links(NAMESPACE)
    assert full.turns == BASE_TURNS and len(done_list(off)) == BASE_TURNS
    assert full.entity > 0 and full.entity == after.get("entity", 0) - before.get("entity", 0)
    assert full.causal == after.get("causal", 0) - before.get("causal", 0)

    whole = copy_of(ingested, tmp_path / "whole")
    whole.consolidate()
    assert weighted_links(off) == weighted_links(whole)
    repeated = off.consolidate()
    assert (repeated.turns, repeated.entity, repeated.causal, repeated.summaries) == (0, 0, 0, 0)


def test_densification_gives_the_links_the_fast_path_wrote_their_weight_for_the_whole_timeline(
    ingested: Path, tmp_path: Path,
) -> None:
    """The fast path weighs an entity link by what was stored when its turn came; consolidation weighs it
    again over every turn. Writing only new links kept the fast path's weights."""
    memory = copy_of(ingested, tmp_path / "mem")
    fast = {key: w for key, w in weighted_links(memory).items() if key[2] == "entity"}
    memory.consolidate()
    now = weighted_links(memory)
    assert fast and any(now[key] != weight for key, weight in fast.items())
    for (src, dst, _), weight in now.items():
        assert 0 < weight <= 1, (src, dst, weight)


def test_two_participants_never_share_a_summary(data_dir: Path) -> None:
    """'Mary Ann' and 'Mary-Ann' had one id, summary:persona:mary-ann:activities: each consolidate told one over
    the other's, and never left them unchanged."""
    memory = Memory("slug", data_dir=str(data_dir))
    turns: list[dict[str, str]] = []
    for s in (1, 2, 3):
        turns += [{"speaker": "Mary Ann", "listener": "Mary-Ann", "dia_id": f"D{s}:1", "time": f"2023-0{s}-10T10:00",
                   "text": f"I went swimming at the lake this morning, session {s}."},
                  {"speaker": "Mary-Ann", "listener": "Mary Ann", "dia_id": f"D{s}:2", "time": f"2023-0{s}-10T10:01",
                   "text": f"Nice! I went painting in the park yesterday, session {s}."}]
    memory.add(turns)
    memory.consolidate()
    told = {r.participant for r in memory.store.all("summary") if r.id.startswith("summary:persona:")}
    assert told == {"Mary Ann", "Mary-Ann"}, told
    assert memory.consolidate().summaries == 0


def test_spaces_around_a_names_hyphen_leave_its_summary_id_as_it_is() -> None:
    """"Mary- Ann" and "Mary -Ann" were read as words ('mary-' and '-ann') and shared an id that neither
    "Mary-Ann" nor "Mary - Ann" had; all four are Mary-Ann, and "Mary Ann" another person."""
    hyphened = {summaries._slug(name) for name in ("Mary-Ann", "Mary - Ann", "Mary- Ann", "Mary -Ann")}
    assert hyphened == {"mary--ann"} and summaries._slug("Mary Ann") == "mary-ann"


def test_an_undo_keeps_a_summary_told_again_since_and_restores_one_that_was_not(data_dir: Path) -> None:
    """A forget tombstones the summaries citing its turn; a consolidation then tells one again without the turn
    (no history row). Undoing the forget wrote the old text back, naming the turn its citations had dropped."""
    memory = Memory("ann", data_dir=str(data_dir))
    store = memory.store
    memory.add([{"speaker": "Ann", "text": "I went swimming at the lake.", "time": "2023-05-01T10:00"},
                {"speaker": "Ann", "text": "I went hiking in the hills.", "time": "2023-05-01T10:05"}])
    told = [Record(id=f"summary:topic:{name}", kind="summary", namespace="ann", text=f"{name}: [T1] [T2]",
                   source_ids=["T1", "T2"]) for name in ("outdoors", "water")]
    store.add(told)
    forget = store.delete("raw:T1", reason="asked to forget")
    for summary in told:
        store.delete(summary.id, reason="cites a forgotten turn", follows=int(forget.id or 0))
    store.add([told[0].model_copy(update={"text": "outdoors: [T2]", "source_ids": ["T2"]})])  # told again
    memory.undo()
    assert store.get_one("raw:T1").status == "active"
    again, untouched = store.get_one("summary:topic:outdoors"), store.get_one("summary:topic:water")
    assert (again.text, again.status, again.source_ids) == ("outdoors: [T2]", "active", ["T2"])
    assert (untouched.text, untouched.status) == ("water: [T1] [T2]", "active")


def test_a_consolidation_while_the_model_is_down_asks_it_again_next_time(ingested: Path, tmp_path: Path) -> None:
    """Turns and summaries told offline while the model could not be reached were counted done, so later runs
    with the model back never asked it (and the summaries kept 'model unavailable' for good)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import Field
    from strata.prompts import graph as graph_prompts

    class Outage(GenericFakeChatModel):
        messages: Any = iter(())
        down: bool = True
        calls: list[str] = Field(default_factory=list)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            system = next(str(m.content) for m in messages if isinstance(m, SystemMessage))
            role = {graph_prompts.CAUSAL_SYSTEM: "causal", graph_prompts.SUMMARY_SYSTEM: "summary"}.get(system, "other")
            self.calls.append(role)
            if self.down and role in ("causal", "summary"):
                raise TimeoutError("the model server timed out")
            reply = {"causal": {"links": []}, "summary": {"title": "Told", "content": "Told by the model."}}.get(role)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=json.dumps(reply or {})))])

    model = Outage()
    shutil.copytree(ingested, tmp_path / "mem")
    memory = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), chat_model=model, model_retries=0, model_backoff=0)
    down = memory.consolidate()
    assert "model unavailable" in down.policy and memory.store.all("summary")
    assert all("model unavailable" in r.policy for r in memory.store.all("summary"))
    assert not memory.store.ledger.neighbours(NAMESPACE, [r.id for r in memory.store.all("raw")],
                                              [LinkType.CAUSAL])  # the cue rule's guesses wait for the model
    model.down, model.calls = False, []
    memory.consolidate()
    assert "causal" in model.calls and "summary" in model.calls
    assert all(r.policy.startswith("model:") for r in memory.store.all("summary"))
    model.calls = []
    assert memory.consolidate().summaries == 0 and "summary" not in model.calls  # done once told


def test_an_anaphoric_cause_points_back_only_from_a_turns_opening_and_within_its_session() -> None:
    """conv-26 D3:1, "... It made me reflect ...", after its own account of the school event, was linked to
    D2:16, the last turn of the session fifteen days before ("Thanks for your kind words")."""
    def turn(dia: str, text: str, speaker: str = "Ann") -> Record:
        return Record(id=f"raw:{dia}", kind="raw", namespace="n", text=text, speaker=speaker, dialogue_id=dia,
                      session=dia[1:].split(":")[0])

    def never(text: str, records: Sequence[Record]) -> list[float]:
        return [0.0] * len(records)

    before = turn("D2:16", "Thanks for your kind words, it means a lot.", "Ben")
    opener = turn("D3:1", "It made me reflect on how far I've come.")
    assert causal.infer(opener, [before], never, ["Ann", "Ben"]) == []  # another session: days old
    told = turn("D2:17", "I spoke at the school event last week. It made me reflect on how far I've come.")
    assert causal.infer(told, [before], never, ["Ann", "Ben"]) == []  # "it" is the turn's own event
    thanks = turn("D2:17", "Thanks, Ben! That's why I moved to Denver.")
    [link] = causal.infer(thanks, [before], never, ["Ann", "Ben"])  # a greeting first: still the opening
    assert (link.cause, link.effect) == ("raw:D2:16", "raw:D2:17")


def test_an_older_consolidation_does_not_take_back_what_a_newer_one_told(
    ingested: Path, tmp_path: Path, locomo_dir: Path
) -> None:
    """Two runs of one namespace overlap: the older read the turns before an add, the newer read them after
    it and finished first. The older one then dissolved the newer one's summaries (19 of 29 in the audit's
    run) and told its groups again from fewer turns, until a third run put them back."""
    memory = copy_of(ingested, tmp_path / "mem")
    store = memory.store
    held, release = threading.Event(), threading.Event()

    def held_policy(group: Any, members: Sequence[Record], offline_text: str) -> None:
        held.set()  # where a model call would be: the older run holds no lock here
        release.wait(120)
        return None  # told offline, as the newer run tells it

    older = threading.Thread(target=consolidate, args=(store,), kwargs={"summary_policy": held_policy})
    older.start()
    assert held.wait(120)
    memory.add(conv26(locomo_dir, BASE_TURNS, MORE_TURNS))
    memory.consolidate()
    told = {r.id: (r.text, tuple(r.source_ids)) for r in store.all("summary")}
    release.set()
    older.join(120)
    assert not older.is_alive()
    assert {r.id: (r.text, tuple(r.source_ids)) for r in store.all("summary")} == told
    assert memory.consolidate().summaries == 0  # nothing left for a third run to put back


def test_a_backfilled_turn_becomes_the_cause_of_the_later_turns_consolidated_before_it(data_dir: Path) -> None:
    """"That's why I moved to Denver." was consolidated with nothing said before it; the turn before it,
    imported afterwards, is its cause (not the cause of "That's why ..." in a later session). Looked at while
    the model is down, the backfilled turn waits for the next run; and a pair already linked is not written
    again."""
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "dia_id": "D2:3", "text": "That's why I moved to Denver.",
                 "time": "2023-05-08T10:05"},
                {"speaker": "Ann", "dia_id": "D3:1", "text": "That's why I love hiking on weekends.",
                 "time": "2023-06-08T10:05"}])
    assert memory.consolidate().causal == 0
    memory.add([{"speaker": "Ben", "dia_id": "D2:2", "text": "Ann got a job offer in Denver last spring.",
                 "time": "2023-05-08T10:00"}])
    offline, retry = offline_causal(memory.store), set[str]()

    def down(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        if causal.cues(record.text):  # as the model's policy, which asks about a turn with a cue word only
            retry.add(record.id)  # told offline while the model was down
        return offline(record, earlier)

    assert consolidate(memory.store, causal_policy=down, retry=retry).causal == 0
    assert "raw:D2:2" not in done_list(memory)
    report = memory.consolidate()
    links = memory.store.ledger.neighbours(NAMESPACE, ["raw:D2:2"], [LinkType.CAUSAL])
    assert report.causal == 1 and [(link.src, link.dst) for link in links] == [("raw:D2:2", "raw:D2:3")]
    memory.store.ledger.set_state(NAMESPACE, DONE, [])  # every turn to do again: every pair is found again
    assert memory.consolidate().causal == 0


def test_a_turn_told_offline_while_the_model_was_down_is_no_backfill(tmp_path: Path, embedder: Any) -> None:
    """The next run asks about that turn again, and only about it: the turns after it were judged with it in
    place, so they are not judged again as if it had been backfilled (each cue turn after it was, each a model
    call: 27 in a session of 40 such turns)."""
    said = ["I lost my job last month.", "So I started baking bread at home.", "That's why I wake up at 4am now.",
            "It was hard because the rent is high.", "So I moved to a cheaper place."]
    memory = Memory("cues", data_dir=str(tmp_path / "mem"))
    memory.add([{"speaker": "Ann" if i % 2 == 0 else "Ben", "dia_id": f"D1:{i + 1}", "text": f"{said[i % 5]} ({i})",
                 "time": "2023-05-08T10:00"} for i in range(15)])
    store = memory.store
    offline = offline_causal(store)
    down_for = "raw:D1:2"
    retry: set[str] = set()

    def model_down_once(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        if record.id == down_for:
            retry.add(record.id)
        return offline(record, earlier)

    consolidate(store, causal_policy=model_down_once, retry=retry, summaries_on=False)
    done = set(store.ledger.get_state("cues", DONE, []) or [])  # type: ignore[arg-type]
    assert retry == {down_for} and down_for not in done and len(done) == 14
    asked: list[str] = []

    def counting(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        if causal.cues(record.text):
            asked.append(record.id)  # where the model policy makes a call
        return offline(record, earlier)

    assert consolidate(store, causal_policy=counting, summaries_on=False).turns == 1
    assert asked == [down_for]
    assert consolidate(store, causal_policy=counting, summaries_on=False).turns == 0
