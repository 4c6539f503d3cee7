"""The Working role answers from the evidence only, briefly, with its sources.

Evidence comes from real LoCoMo turns (conv-26, with their session dates)
stored in a real Chroma memory; the model policy is exercised with LangChain's
fake chat models, including the malformed replies real models send.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

import pytest
import strata.graph  # noqa: F401  (loads the graph package before the role modules it wires)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from strata.agents.common import evidence_of
from strata.agents.working import NOT_IN_MEMORY, answer_offline, classify, working
from strata.graph.context import Context
from strata.graph.state import Evidence, Plan, State
from strata.memory.records import Record, Turn
from strata.memory.records import raw_record as stored_turn
from strata.memory.registry import close_all, open_store
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata.conversations import load_turns

NAMESPACE = "ns"


@pytest.fixture(scope="module")
def conv26(locomo_dir: Path) -> dict[str, Turn]:
    """conv-26's turns by dialogue id (speakers, text, captions and session dates only)."""
    return {turn.dia_id or "": turn for turn in load_turns(locomo_dir / "conv-26.json").turns()}


@pytest.fixture
def store(data_dir: Path, embedder: object) -> Iterator[MemoryStore]:
    yield open_store(StoreSettings(data_dir=str(data_dir)), NAMESPACE)
    close_all()


def runtime_for(data_dir: Path, chat_model: object = None) -> Runtime[Context]:
    return Runtime(context=Context(namespace=NAMESPACE, data_dir=str(data_dir), mode="ask", chat_model=chat_model))


def raw_record(turn: Turn) -> Record:
    return stored_turn(turn, NAMESPACE)


def stored_evidence(store: MemoryStore, records: list[Record]) -> list[Evidence]:
    """Evidence as research hands it over: records written to Chroma, read back, labelled."""
    store.add(records)
    return [evidence_of(record, score=1.0, found_by=["dense"]) for record in store.get(r.id for r in records)]


def turns_evidence(store: MemoryStore, conv26: dict[str, Turn], ids: list[str]) -> list[Evidence]:
    return stored_evidence(store, [raw_record(conv26[i]) for i in ids])


def ask(question: str, evidence: list[Evidence], data_dir: Path, chat_model: object = None) -> dict[str, object]:
    state = State(question=question, evidence=evidence, stage="asking")
    return working(state, runtime_for(data_dir, chat_model))


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=reply) for reply in replies]))


# --- the offline reader on real turns ---------------------------------------------------------


def test_when_question_resolves_yesterday_against_the_session_date(
    store: MemoryStore, conv26: dict[str, Turn], data_dir: Path
) -> None:
    # D1:3 "I went to a LGBTQ support group yesterday ..." was said on 8 May 2023.
    evidence = turns_evidence(store, conv26, ["D1:1", "D1:2", "D1:3", "D1:4", "D1:5"])
    out = ask("When did Caroline go to the LGBTQ support group?", evidence, data_dir)
    assert "7 May 2023" in str(out["answer"])
    assert out["cited_ids"] == ["D1:3"]
    assert out["stage"] == "done"
    assert out["trace"][-1].role == "working" and out["trace"][-1].policy == "offline"  # type: ignore[index]


def test_last_year_becomes_the_year_before_the_session(
    store: MemoryStore, conv26: dict[str, Turn], data_dir: Path
) -> None:
    # D1:14 "Yeah, I painted that lake sunrise last year!" (8 May 2023): gold answer 2022.
    evidence = turns_evidence(store, conv26, ["D1:12", "D1:13", "D1:14", "D1:15"])
    out = ask("When did Melanie paint a sunrise?", evidence, data_dir)
    assert out["answer"] == "2022"
    assert out["cited_ids"] == ["D1:14"]


def test_what_question_gives_a_short_span(store: MemoryStore, conv26: dict[str, Turn], data_dir: Path) -> None:
    # D2:8 Caroline: "Researching adoption agencies — it's been a dream ...": gold answer "Adoption agencies".
    evidence = turns_evidence(store, conv26, ["D2:7", "D2:8", "D2:9"])
    out = ask("What did Caroline research?", evidence, data_dir)
    assert str(out["answer"]).lower() == "adoption agencies"
    assert out["cited_ids"] == ["D2:8"]


def test_answer_cut_before_the_next_predicate(store: MemoryStore, conv26: dict[str, Turn], data_dir: Path) -> None:
    # D2:2: "Making a difference & raising awareness for mental health is super rewarding": gold "mental health".
    evidence = turns_evidence(store, conv26, ["D2:1", "D2:2", "D2:3"])
    out = ask("What did the charity race raise awareness for?", evidence, data_dir)
    assert out["answer"] == "mental health"


def test_what_kind_question_gives_the_noun_phrase(
    store: MemoryStore, conv26: dict[str, Turn], data_dir: Path
) -> None:
    # D4:15 "... creating a safe, inviting place for people to grow";
    # gold answer: "a safe and inviting place for people to grow".
    evidence = turns_evidence(store, conv26, ["D4:14", "D4:15", "D4:16"])
    out = ask("What kind of place does Caroline want to create for people?", evidence, data_dir)
    assert out["answer"] == "safe, inviting place for people to grow"
    assert out["cited_ids"] == ["D4:15"]


def test_where_question_takes_the_place(store: MemoryStore, conv26: dict[str, Turn], data_dir: Path) -> None:
    # D4:3: "a gift from my grandma in my home country, Sweden".
    evidence = turns_evidence(store, conv26, ["D4:2", "D4:3", "D4:4"])
    out = ask("Which country is Caroline's grandma from?", evidence, data_dir)
    assert out["answer"] == "Sweden"
    assert out["cited_ids"] == ["D4:3"]


def test_facts_with_resolved_dates_answer_when_questions(store: MemoryStore, data_dir: Path) -> None:
    fact = Record(
        id="fact:D1:3:0", kind="fact", text="Caroline went to an LGBTQ support group on 7 May 2023.",
        namespace=NAMESPACE, dialogue_id="D1:3", speaker="Caroline", source_ids=["D1:3"], subject="Caroline",
    )
    evidence = stored_evidence(store, [fact])
    out = ask("When did Caroline go to the LGBTQ support group?", evidence, data_dir)
    assert out["answer"] == "7 May 2023"
    assert out["cited_ids"] == ["D1:3"]


@pytest.mark.parametrize(
    ("question", "ids"),
    [
        # LoCoMo category 5: Melanie ran the race and realised it; the question asks about Caroline.
        ("What did Caroline realize after her charity race?", ["D2:1", "D2:2", "D2:3"]),
        # Caroline went to the council meeting; the question asks about Melanie.
        ("What did Melanie see at the council meeting for adoption?", ["D8:8", "D8:9", "D8:10"]),
        # Nothing about a pet snake was ever said.
        ("What is the name of Caroline's pet snake?", ["D1:3", "D1:5", "D2:8"]),
    ],
)
def test_adversarial_questions_are_not_in_memory(
    question: str, ids: list[str], store: MemoryStore, conv26: dict[str, Turn], data_dir: Path
) -> None:
    out = ask(question, turns_evidence(store, conv26, ids), data_dir)
    assert out["answer"] == NOT_IN_MEMORY
    assert out["cited_ids"] == []


def said(*rows: tuple[str, str, str, str]) -> list[Turn]:
    """Turns from (speaker, text, dialogue id, time) rows."""
    return [Turn(speaker=who, text=text, dia_id=dia_id, time=when)  # type: ignore[arg-type]
            for who, text, dia_id, when in rows]


def test_the_latest_statement_gives_the_current_value(store: MemoryStore, data_dir: Path) -> None:
    turns = said(
        ("Ann", "I live in Boston.", "D1:1", "2023-05-08T10:00"),
        ("Ben", "Boston is lovely in spring!", "D1:2", "2023-05-08T10:01"),
        ("Ann", "I moved to Denver last month.", "D2:1", "2023-07-03T10:00"),
    )
    evidence = stored_evidence(store, [raw_record(t) for t in turns])
    out = ask("Where does Ann live?", evidence, data_dir)
    assert out["answer"] == "Denver" and out["cited_ids"] == ["D2:1"]
    out = ask("Where did Ann live in May 2023?", evidence, data_dir)
    assert out["answer"] == "Boston" and out["cited_ids"] == ["D1:1"]


def test_a_name_question_gets_the_name_given_to_what_it_asks_about(
    store: MemoryStore, conv26: dict[str, Turn], data_dir: Path
) -> None:
    # D13:4: "... thanks for asking, they're good- we got another cat named Bailey too. Here's a pic of Oliver."
    evidence = turns_evidence(store, conv26, ["D13:3", "D13:4", "D13:5"])
    for question in ("What is the name of Melanie's new cat?", "What did Melanie name her new cat?"):
        out = ask(question, evidence, data_dir)
        assert (out["answer"], out["cited_ids"]) == ("Bailey", ["D13:4"]), question


def test_a_name_given_in_the_next_sentence_of_the_turn(locomo_dir: Path, store: MemoryStore, data_dir: Path) -> None:
    # conv-41 D30:1: "... Guess what - I got a puppy two weeks ago! Her name's Coco and she's adorable."
    turns = {t.dia_id: t for t in load_turns(locomo_dir / "conv-41.json").turns()}
    evidence = stored_evidence(store, [raw_record(turns[i]) for i in ("D30:1", "D30:2", "D30:3")])
    out = ask("What is the name of the puppy Maria got two weeks ago?", evidence, data_dir)
    assert (out["answer"], out["cited_ids"]) == ("Coco", ["D30:1"])


def app_turns() -> list[Turn]:
    """An app's user talking to its assistant: the asker of a first-person question is the user."""
    return said(
        ("user", "Hi! I just moved to Denver last week for a new job at Acme.", "T1", "2024-03-01T10:00"),
        ("assistant", "Congratulations on the move! How are you settling in?", "T2", "2024-03-02T10:00"),
        ("user", "Pretty well. My sister Jane lives nearby, which helps.", "T3", "2024-03-03T10:00"),
        ("assistant", "That's great to have family close.", "T4", "2024-03-04T10:00"),
        ("user", "About 30 miles a week. My dog Rex comes along on the short runs.", "T5", "2024-03-05T10:00"),
        ("user", "I'm Bob, by the way. I'm vegetarian, so please don't suggest meat dishes.", "T6", "2024-03-06T10:00"),
        ("user", "My daughter Emma turns 7 on June 12.", "T7", "2024-03-07T10:00"),
    )


@pytest.mark.parametrize(
    ("question", "answer", "cited"),
    [
        ("What's my sister's name?", "Jane", ["T3"]),
        ("What is my dog called?", "Rex", ["T5"]),
        ("Who is Jane?", "My sister", ["T3"]),
        ("Who is Rex?", "My dog", ["T5"]),
        # the latest statement about living somewhere is the sister's, not the user's
        ("Where do I live?", "Denver", ["T1"]),
        ("What is my name?", "Bob", ["T6"]),
        ("Am I vegetarian?", "Yes", ["T6"]),  # the "don't" is in another clause
        ("How old is Emma turning?", "7", ["T7"]),  # not "7 on"
        ("Who is Emma?", "My daughter", ["T7"]),  # not "June"
    ],
)
def test_first_person_questions_from_an_app_user(
    question: str, answer: str, cited: list[str], store: MemoryStore, data_dir: Path
) -> None:
    evidence = stored_evidence(store, [raw_record(t) for t in app_turns()])
    out = ask(question, evidence, data_dir)
    assert (out["answer"], out["cited_ids"]) == (answer, cited)


@pytest.mark.parametrize(
    ("question", "answer", "cited"),
    [
        ("Where am I going in October?", "Japan", ["T1"]),  # the place is in the turn's other sentence
        ("What is my husband's name?", "Mark", ["T1"]),  # not the later "a cat named Miso"
        ("What is my cat's name?", "Miso", ["T5"]),
        ("What is Mark allergic to?", "shellfish", ["T4"]),
        ("How long will we stay?", "Two weeks", ["T3"]),  # the answer to the assistant's question
        ("What cities do we want to visit?", "Kyoto, Osaka, Hiroshima", ["T3"]),
        ("What country am I going to?", "Japan", ["T1"]),
    ],
)
def test_an_app_user_planning_a_trip(
    question: str, answer: str, cited: list[str], store: MemoryStore, data_dir: Path
) -> None:
    turns = said(
        ("user", "Can you help me plan a trip to Japan? I'm going in October with my husband Mark.", "T1",
         "2024-05-01T10:00"),
        ("assistant", "Sure! How long will you stay?", "T2", "2024-05-01T10:01"),
        ("user", "Two weeks. We want to visit Kyoto and Osaka, and maybe Hiroshima.", "T3", "2024-05-01T10:02"),
        ("user", "Mark is allergic to shellfish.", "T4", "2024-05-02T10:00"),
        ("user", "I have a cat named Miso who needs a sitter while we're away.", "T5", "2024-05-03T10:00"),
    )
    out = ask(question, stored_evidence(store, [raw_record(t) for t in turns]), data_dir)
    assert (out["answer"], out["cited_ids"]) == (answer, cited)


@pytest.mark.parametrize(
    ("question", "answer", "cited"),
    [
        ("What are my kids' names?", "Lily, Max", ["T1"]),  # a plural noun names all that follow it
        ("How old is Max?", "6", ["T4"]),  # not "6 yesterday"
        ("Where do I live?", "Austin", ["T3"]),  # "from Chicago to Austin": Austin now
        ("Where did I live before?", "Chicago", ["T3"]),  # the past asked: where the move began
        ("Why did we move to Austin?", "wife's job", ["T3"]),  # "because", not the "to" before it
        ("When did we adopt Pepper?", "the Saturday before 2 April 2024", ["T5"]),
    ],
)
def test_an_app_user_with_a_family(
    question: str, answer: str, cited: list[str], store: MemoryStore, data_dir: Path
) -> None:
    turns = said(
        ("user", "I have two kids, Lily and Max. Lily is 8 and Max is 5.", "T1", "2024-01-10T09:00"),
        ("user", "I started learning Spanish last week. I already speak English and French.", "T2",
         "2024-02-14T19:00"),
        ("user", "We moved from Chicago to Austin because of my wife's job.", "T3", "2024-06-20T18:00"),
        ("user", "Max just turned 6 yesterday! We had a party at the park.", "T4", "2024-06-20T18:05"),
        ("user", "We also adopted a cat called Pepper on Saturday.", "T5", "2024-04-02T08:30"),
    )
    out = ask(question, stored_evidence(store, [raw_record(t) for t in turns]), data_dir)
    assert (out["answer"], out["cited_ids"]) == (answer, cited)


@pytest.mark.parametrize(
    ("question", "answer", "cited"),
    [
        ("Who is Raj?", "My teammate", ["T2"]),  # what the speaker calls him, before any other name
        ("When did Raj leave?", "the Friday before 11 March 2024", ["T3"]),  # "left" is a form of "leave"
        # the reply to the assistant's question, not "use type hints"
        ("What database do we use?", "PostgreSQL for now, but we might switch to SQLite for the mobile", ["T1"]),
    ],
)
def test_an_app_user_building_software(
    question: str, answer: str, cited: list[str], store: MemoryStore, data_dir: Path
) -> None:
    turns = said(
        ("assistant", "Nice! What database are you using?", "T0", "2024-03-04T10:00"),
        ("user", "PostgreSQL for now, but we might switch to SQLite for the mobile version.", "T1",
         "2024-03-04T10:01"),
        ("user", "My teammate Raj handles the frontend, he writes it in React.", "T2", "2024-03-04T10:02"),
        ("user", "Also, Raj left the team on Friday, so I'm doing the frontend myself now.", "T3",
         "2024-03-11T14:00"),
        ("user", "Please always use type hints and keep functions short.", "T4", "2024-03-11T14:05"),
    )
    out = ask(question, stored_evidence(store, [raw_record(t) for t in turns]), data_dir)
    assert (out["answer"], out["cited_ids"]) == (answer, cited)


def test_the_clause_that_states_the_asked_relation_answers(store: MemoryStore, data_dir: Path) -> None:
    turns = said(
        ("user", "I live in Boston and work as a teacher.", "T1", "2024-01-01T10:00"),
        ("user", "Actually I moved to Denver last month, and I now work as a nurse.", "T2", "2024-03-01T10:00"),
    )
    out = ask("What is my job?", stored_evidence(store, [raw_record(t) for t in turns]), data_dir)
    assert (out["answer"], out["cited_ids"]) == ("now work as a nurse", ["T2"])  # "work" states the job


def test_a_sentence_about_someone_the_speaker_names_is_not_about_the_speaker(
    store: MemoryStore, data_dir: Path
) -> None:
    turns = said(
        ("Ann", "I live in Boston.", "D1:1", "2023-05-08T10:00"),
        ("Ann", "My brother Tom lives in Chicago now.", "D2:1", "2023-07-03T10:00"),
        ("Ann", "My brother Tom and I live in Austin now.", "D3:1", "2023-09-03T10:00"),
    )
    evidence = stored_evidence(store, [raw_record(t) for t in turns[:2]])
    out = ask("Where does Ann live?", evidence, data_dir)
    assert (out["answer"], out["cited_ids"]) == ("Boston", ["D1:1"])
    evidence = stored_evidence(store, [raw_record(t) for t in turns])
    out = ask("Where does Ann live?", evidence, data_dir)  # "... and I": about Ann again
    assert (out["answer"], out["cited_ids"]) == ("Austin", ["D3:1"])


def test_no_evidence_is_not_in_memory_without_asking_a_model(data_dir: Path) -> None:
    model = fake()  # would raise StopIteration if it were called
    out = ask("Where does Caroline live?", [], data_dir, chat_model=model)
    assert out["answer"] == NOT_IN_MEMORY and out["cited_ids"] == []


def test_questions_in_the_evidence_are_not_answers(conv26: dict[str, Turn]) -> None:
    # D1:10 asks "What kinda jobs are you thinkin' of?"; D1:11 answers it.
    evidence = [evidence_of(raw_record(conv26[i])) for i in ("D1:10", "D1:11")]
    answer, cited = answer_offline("What jobs is Caroline thinking of?", evidence)
    assert "counseling" in answer
    assert cited == ["D1:11"]


def _said(dia_id: str, text: str, moment: datetime | None) -> Evidence:
    return evidence_of(raw_record(Turn(speaker="Ann", text=text, dia_id=dia_id, time=moment)))


def test_an_undated_turn_is_answered_with_the_date_as_said() -> None:
    """With no time to count from, "yesterday" stays "yesterday": the wall clock made it the day before today."""
    evidence = [_said("m1", "I adopted a dog named Rex yesterday.", None)]
    assert answer_offline("When did Ann adopt a dog?", evidence) == ("yesterday", ["m1"])
    stated = [_said("m1", "I adopted a dog named Rex on 8 May 2023.", None)]
    assert answer_offline("When did Ann adopt a dog?", stated)[0] == "8 May 2023"


def test_a_period_named_without_a_year_prefers_what_falls_in_it(data_dir: Path) -> None:
    """"in March" has no year of its own: Research resolves it against the conversation's now and hands the
    window on in its plan; the reader prefers what was said in it, as it does for "in March 2023"."""
    evidence = [
        _said("T1", "I baked sourdough bread with my neighbour.", datetime(2023, 3, 1, 10)),
        _said("T2", "I baked a carrot cake for my dad.", datetime(2023, 5, 3, 10)),
    ]
    march = (date(2023, 3, 1), date(2023, 3, 31))
    assert answer_offline("What did Ann bake in March?", evidence, march)[1] == ["T1"]
    plan = Plan(query="What did Ann bake in March?", days=march)
    state = State(question="What did Ann bake in March?", evidence=evidence, stage="asking", plan=plan)
    out = working(state, runtime_for(data_dir))
    assert "sourdough" in str(out["answer"]) and out["cited_ids"] == ["T1"]


def test_a_window_at_the_calendar_edge_is_no_error() -> None:
    """A window from 1 January 1 or to 31 December 9999 (placeholder times made "now") still scores."""
    evidence = [_said("T1", "I baked sourdough bread.", datetime(1, 1, 2)), _said("T2", "I baked a cake.", None)]
    for window in ((date(1, 1, 1), date(1, 1, 31)), (date(9999, 12, 1), date.max)):
        assert answer_offline("What did Ann bake this month?", evidence, window)[0] != NOT_IN_MEMORY


def test_a_who_question_prefers_the_sentence_that_names_someone() -> None:
    """In the shipped sample, the photo caption (D2:1) matches "blue bowl" best, but only D2:3 says who gets it."""
    sample = Path(__file__).resolve().parents[1] / "strata" / "data" / "sample_conversation.json"
    # what research hands over for this question: the first two sessions
    evidence = [evidence_of(raw_record(t)) for t in load_turns(sample).turns() if t.session_label() in ("1", "2")]
    answer, cited = answer_offline("Who is Marco giving the blue bowl to?", evidence)
    assert (answer, cited) == ("Sofia", ["D2:3"])


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When did Melanie run a charity race?", "when"),
        ("How long ago was Caroline's 18th birthday?", "when"),
        ("How many children does Melanie have?", "how_many"),
        ("Where has Melanie camped?", "where"),
        ("What country is Caroline's grandma from?", "where"),
        ("Who performed at the concert?", "who"),
        ("Why did Caroline choose the adoption agency?", "why"),
        ("Did Melanie make the black and white bowl?", "yes_no"),
        ("How did Melanie feel after the accident?", "how"),
        ("What did Caroline research?", "what"),
    ],
)
def test_question_types(question: str, kind: str) -> None:
    assert classify(question) == kind


# --- the model policy -------------------------------------------------------------------------


@pytest.fixture
def support_group(store: MemoryStore, conv26: dict[str, Turn]) -> list[Evidence]:
    return turns_evidence(store, conv26, ["D1:2", "D1:3", "D1:5"])


def test_model_answer_and_citations_are_kept_within_the_evidence(
    support_group: list[Evidence], data_dir: Path
) -> None:
    reply = '{"answer": "7 May 2023", "cited_ids": ["D1:3", "raw:D1:5", "D9:99"]}'
    out = ask("When did Caroline go to the LGBTQ support group?", support_group, data_dir, fake(reply))
    assert out["answer"] == "7 May 2023"
    assert out["cited_ids"] == ["D1:3", "D1:5"]  # a record id maps to its turn; an unknown id is dropped
    assert out["trace"][-1].policy == "model:GenericFakeChatModel"  # type: ignore[index]


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"answer": "7 May 2023", "cited_ids": ["D1:3"]}\n```',
        'Here is the answer you asked for:\n{"answer": "7 May 2023", "cited_ids": "D1:3"}\nHope it helps.',
    ],
)
def test_model_json_in_fences_or_prose_is_read(reply: str, support_group: list[Evidence], data_dir: Path) -> None:
    out = ask("When did Caroline go to the LGBTQ support group?", support_group, data_dir, fake(reply))
    assert out["answer"] == "7 May 2023"
    assert out["cited_ids"] == ["D1:3"]
    assert str(out["trace"][-1].policy).startswith("model:")  # type: ignore[index]


def test_model_without_usable_citations_cites_the_supporting_turn(
    support_group: list[Evidence], data_dir: Path
) -> None:
    reply = '{"answer": "an LGBTQ support group", "cited_ids": ["turn three"]}'
    out = ask("Where did Caroline go on 7 May 2023?", support_group, data_dir, fake(reply))
    assert out["answer"] == "an LGBTQ support group"
    assert out["cited_ids"] == ["D1:3"]


def test_model_abstention_is_normalised(support_group: list[Evidence], data_dir: Path) -> None:
    reply = '{"answer": "Not in memory", "cited_ids": ["D1:3"]}'
    out = ask("What is Caroline's favorite food?", support_group, data_dir, fake(reply))
    assert out["answer"] == NOT_IN_MEMORY and out["cited_ids"] == []


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty reply"),
        ("I think she went there the day before.", "no JSON object"),
        ('{"cited_ids": ["D1:3"]}', "field answer"),
        ('{"answer": 7, "cited_ids": ["D1:3"]}', "field answer"),
        ('{"answer": ["7 May"], "cited_ids": ["D1:3"]}', "field answer"),  # (cited_ids: 3 is read: no citation)
        ('{"answer": "   ", "cited_ids": []}', "field answer"),  # only spaces: no answer
    ],
)
def test_malformed_model_output_falls_back_to_the_offline_reader(
    reply: str, problem: str, support_group: list[Evidence], data_dir: Path
) -> None:
    out = ask("When did Caroline go to the LGBTQ support group?", support_group, data_dir, fake(reply))
    assert "7 May 2023" in str(out["answer"])  # the offline reader's answer
    assert out["cited_ids"] == ["D1:3"]
    policy = str(out["trace"][-1].policy)  # type: ignore[index]
    assert policy.startswith("offline (model output unusable:") and problem in policy


HASH_SEED_CHECK = """
import sys
from pathlib import Path
from strata.agents.common import evidence_of
from strata.agents.working import answer_offline
from strata.conversations import load_turns
from strata.memory.records import raw_record
turns = {t.dia_id: t for t in load_turns(Path(sys.argv[1])).turns()}
ids = sys.argv[3].split(",")
print(answer_offline(sys.argv[2], [evidence_of(raw_record(turns[i], "conv-26")) for i in ids]))
"""


def test_the_offline_answer_does_not_depend_on_the_hash_seed(locomo_dir: Path, offline_env: dict[str, str]) -> None:
    """A coverage exactly at MIN_COVERAGE must not fall on either side by the order a set is summed in, which
    each process's hash seed decides (this question, with BM25's context, said "Yes" or "Not in memory.")."""
    import subprocess
    import sys

    question = "Did Caroline make the black and white bowl in the photo?"
    context = "D5:7,D5:6,D16:8,D12:4,D10:21,D4:4,D7:18,D12:5,D13:4,D5:8"
    answers = {
        subprocess.run([sys.executable, "-c", HASH_SEED_CHECK, str(locomo_dir / "conv-26.json"), question, context],
                       capture_output=True, text=True, env={**offline_env, "PYTHONHASHSEED": str(seed)},
                       timeout=300, check=True).stdout.strip()
        for seed in range(1, 5)
    }
    assert len(answers) == 1, answers


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("My sister Jane is a teacher.", "teacher"),
        ("Hi! My sister Jane just got a job as a pilot.", "got a job as a pilot"),
        ("My sister's name is Jane and she is a lawyer.", "lawyer"),  # the clause naming her says nothing else
        ("I have a sister, Jane. She teaches math at a high school.", "teaches math at a high school"),
    ],
)
def test_what_someone_does_is_what_is_said_of_them_not_the_name_they_are_given(
    text: str, answer: str, store: MemoryStore, data_dir: Path
) -> None:
    """"What does my sister do?" was answered "Jane": the answer was cut after the asked-about word, where the
    name the sentence gives her stands."""
    evidence = stored_evidence(store, [raw_record(t) for t in said(("user", text, "T1", "2024-03-01T10:00"))])
    out = ask("What does my sister do?", evidence, data_dir)
    assert (out["answer"], out["cited_ids"]) == (answer, ["T1"])
