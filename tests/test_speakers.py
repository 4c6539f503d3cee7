"""Pronouns rewritten as names, and participants found in questions, on LoCoMo conv-26 turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.memory.speakers import resolve_participant, to_third_person


@pytest.fixture(scope="module")
def conv26(locomo_dir: Path) -> dict[str, tuple[str, str, str]]:
    """dia_id -> (speaker, listener, text); only `session_N` lists are read."""
    raw = json.loads((locomo_dir / "conv-26.json").read_text(encoding="utf-8"))
    turns: dict[str, tuple[str, str]] = {}
    number = 1
    while f"session_{number}" in raw:
        for turn in raw[f"session_{number}"]:
            turns[turn["dia_id"]] = (turn["speaker"], turn["text"])
        number += 1
    people = sorted({speaker for speaker, _ in turns.values()})
    assert people == ["Caroline", "Melanie"]
    other = {people[0]: people[1], people[1]: people[0]}
    return {dia_id: (speaker, other[speaker], text) for dia_id, (speaker, text) in turns.items()}


def _third(conv26: dict[str, tuple[str, str, str]], dia_id: str) -> str:
    speaker, listener, text = conv26[dia_id]
    return to_third_person(text, speaker, listener)


# --- real turns -------------------------------------------------------------------------------


def test_keen_on_counseling(conv26: dict[str, tuple[str, str, str]]) -> None:
    assert _third(conv26, "D1:11") == (
        "Caroline is keen on counseling or working in mental health - "
        "Caroline would love to support those with similar issues."
    )


def test_past_tense_and_object_pronouns(conv26: dict[str, tuple[str, str, str]]) -> None:
    assert _third(conv26, "D1:3") == "Caroline went to a LGBTQ support group yesterday and it was so powerful."
    assert _third(conv26, "D1:7") == (
        "The support group has made Caroline feel accepted and given Caroline courage to embrace Caroline."
    )


def test_possessives_and_second_person(conv26: dict[str, tuple[str, str, str]]) -> None:
    # Melanie speaking to Caroline
    assert _third(conv26, "D2:17").startswith("No doubts, Caroline. Caroline has such a caring heart")
    speaker, listener, text = conv26["D2:7"]
    rewritten = to_third_person(text, speaker, listener)
    assert "Melanie's kids are so excited about summer break!" in rewritten
    assert "Melanie is doing Melanie's best." in rewritten


def test_we_is_both_participants_when_the_sentence_says_so(conv26: dict[str, tuple[str, str, str]]) -> None:
    rewritten = _third(conv26, "D2:1")
    assert "since Melanie and Caroline last chatted, Melanie has had a lot of things happening to Melanie." in rewritten


def test_we_is_the_speakers_family_when_the_turn_talks_of_it(conv26: dict[str, tuple[str, str, str]]) -> None:
    # D2:7 mentions "My kids": the camping plan is Melanie's family's, not Caroline's.
    rewritten = _third(conv26, "D2:7")
    assert "Melanie's family are thinking about going camping next month." in rewritten
    assert "Caroline are thinking" not in rewritten


def test_we_resolution_can_use_the_whole_turn_as_context(conv26: dict[str, tuple[str, str, str]]) -> None:
    speaker, listener, text = conv26["D8:2"]  # "... I finally took my kids to a pottery workshop. We all made ..."
    sentence = "We all made our own pots, it was fun and therapeutic!"
    assert sentence in text
    assert to_third_person(sentence, speaker, listener, context=text) == (
        "Melanie's family all made Melanie's own pots, it was fun and therapeutic!"
    )


def test_no_first_person_survives_in_any_turn(conv26: dict[str, tuple[str, str, str]]) -> None:
    import re

    first_person = re.compile(r"(?<![\w'’-])(?:I|me|my|mine|myself|I['’](?:m|ve|d|ll))(?![\w'’-])")
    for dia_id, (speaker, listener, text) in conv26.items():
        rewritten = to_third_person(text, speaker, listener, context=text)
        leftover = first_person.findall(rewritten)
        assert not leftover, f"{dia_id}: {leftover} in {rewritten!r}"


# --- constructed sentences --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I'm keen on counseling.", "Caroline is keen on counseling."),
        ("I've been there.", "Caroline has been there."),
        ("I'd love to go.", "Caroline would love to go."),
        ("I'd been there before.", "Caroline had been there before."),
        ("I'll call you.", "Caroline will call Melanie."),
        ("I was young.", "Caroline was young."),
        ("I love painting.", "Caroline loves painting."),
        ("I have two kids.", "Caroline has two kids."),
        ("I am happy.", "Caroline is happy."),
        ("I do yoga.", "Caroline does yoga."),
        ("I don't smoke.", "Caroline doesn't smoke."),
        ("I try hard and I watch movies.", "Caroline tries hard and Caroline watches movies."),
        ("I really, truly love it.", "Caroline really, truly loves it."),
        ("I need a break.", "Caroline needs a break."),
        ("I wanna help.", "Caroline wants to help."),
        ("My kids love me.", "Caroline's kids love Caroline."),
        ("That book is mine.", "That book is Caroline's."),
        ("I made it to remind myself.", "Caroline made it to remind Caroline."),
        ("You have such a caring heart.", "Melanie has such a caring heart."),
        ("I think you are great.", "Caroline thinks Melanie is great."),
        ("Your kids are lovely.", "Melanie's kids are lovely."),
        ("You're gonna make it.", "Melanie is gonna make it."),
        ("Are you going?", "Is Melanie going?"),
        ("Your family is gonna be lucky to have you.", "Melanie's family is gonna be lucky to have Melanie."),
        ("Thank you!", "Thank you!"),
        ("It's great, you know?", "It's great, you know?"),
        ("I'm carving out some me-time.", "Caroline is carving out some me-time."),
        ("We visited the US.", "Caroline and others visited the US."),
        ("You thinking about it is great.", "Melanie thinking about it is great."),  # a gerund keeps its form
        ("I bring snacks and you sing.", "Caroline brings snacks and Melanie sings."),
    ],
)
def test_constructed(text: str, expected: str) -> None:
    assert to_third_person(text, "Caroline", "Melanie") == expected


def test_you_is_left_alone_when_the_listener_is_unknown() -> None:
    assert to_third_person("I miss you and your jokes.", "Caroline") == "Caroline misses you and your jokes."


def test_sentence_initial_capital_is_kept_for_lowercase_names() -> None:
    assert to_third_person("I go there. i love it.", "user") == "User goes there. user loves it."


def test_empty_speaker_is_an_error() -> None:
    with pytest.raises(ValueError, match="speaker is empty"):
        to_third_person("I went.", "  ")


# --- resolve_participant ----------------------------------------------------------------------

PEOPLE = ["Caroline", "Melanie"]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("When did Caroline go to the LGBTQ support group?", ["Caroline"]),
        ("What is Melanie's favorite book?", ["Melanie"]),
        ("What did Mel paint last year?", ["Melanie"]),  # a nickname that starts the name
        ("When did melanie go camping?", ["Melanie"]),  # full names match in any case
        ("What did Mel do after Caroline's parade?", ["Melanie", "Caroline"]),  # order of mention
        ("Would Caroline and Melanie go hiking together?", ["Caroline", "Melanie"]),
        ("What car does she drive?", []),  # lowercase 'car' is not 'Caroline'
        ("What is the weather like?", []),
    ],
)
def test_resolve_participant(question: str, expected: list[str]) -> None:
    assert resolve_participant(question, PEOPLE) == expected


def test_resolve_participant_full_and_last_names() -> None:
    people = ["Jon Smith", "Gina Lopez"]
    assert resolve_participant("Where does Smith work?", people) == ["Jon Smith"]
    assert resolve_participant("Did Gina Lopez open a store?", people) == ["Gina Lopez"]
    assert resolve_participant("What's Gina's store called?", people) == ["Gina Lopez"]
    assert resolve_participant("Who is Carl?", people) == []
