"""Entity keys that do not depend on how a word is used or written, on real LoCoMo turns and the audit's cases.

Two turns are joined by an entity node when they share a key, so a key must
name a thing: an adjective that only describes the noun after it ("a long day",
"a long way") must not join two turns, nor a verb's -s form ("stands out",
"Time flies"); and the same thing must get the same key whatever its case
("my mom", "my Mom"; "books", "Books") or however its name is joined
("Jean-Luc", "J.K. Rowling").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.memory.entities import split_entities
from strata.memory.graph.entities import find_mentions

from strata.conversations import LoadedConversation, load_turns


@pytest.fixture(scope="module")
def conversations(locomo_dir: Path) -> dict[str, LoadedConversation]:
    return {n: load_turns(locomo_dir / f"conv-{n}.json") for n in ("26", "30", "42", "43")}


def keys_of(conversation: LoadedConversation, dia_id: str) -> set[str]:
    """A turn's entity keys as the Memory role finds them (its photo's caption included)."""
    people = sorted({t.speaker for s in conversation.sessions for t in s.turns})
    turn = next(t for s in conversation.sessions for t in s.turns if t.dia_id == dia_id)
    said = f"{turn.text} ({turn.image_caption})" if turn.image_caption else turn.text
    listener = next(p for p in people if p != turn.speaker)
    return {m.key for m in find_mentions(said, turn.speaker, listener, people)}


def keys(text: str) -> list[str]:
    return [m.key for m in find_mentions(text, "Caroline", "Melanie")]


def test_an_adjective_before_its_noun_joins_no_turns(conversations: dict[str, LoadedConversation]) -> None:
    conv26 = conversations["26"]
    # D1:16 "relax after a long day" and D3:2 "You've come a long way" share only the person they address
    assert keys_of(conv26, "D1:16") & keys_of(conv26, "D3:2") == {"caroline"}
    # D2:16 and D19:5 "a safe and loving home": the home, not "safe"
    for dia_id in ("D2:16", "D19:5"):
        assert "safe" not in keys_of(conv26, dia_id)
    assert keys("It's a great way to relax after a long day.") == []
    assert keys("I'll make sure these kids have a safe and loving home.") == ["kid"]
    assert "real" not in keys("You made a real difference to the kids.")
    # the noun the adjective describes keeps its owner and its compound
    assert {"sister", "caroline's sister"} <= set(keys("This is my little sister."))
    assert {"walk", "long walk"} <= set(keys("We took a long walk.")) and "long" not in keys("We took a long walk.")
    # a noun the lexicon also calls an adjective (no "videoer") stays a thing: "a video game", "the living room"
    assert {"video", "game", "video game"} <= set(keys("I won my first video game tournament."))
    assert "living" in keys("We painted the living room.")
    assert "plane" in keys_of(conv26, "D10:14")  # "a plane flying in the sky"


def test_a_verb_after_its_subject_is_not_a_plural(conversations: dict[str, LoadedConversation]) -> None:
    conv26, conv30 = conversations["26"], conversations["30"]
    assert "stand" not in keys_of(conv26, "D1:10")  # "Anything that stands out?"
    assert "stand" not in keys_of(conv30, "D5:6")  # "your business really stands out"
    assert "fly" not in keys_of(conv26, "D3:16") | keys_of(conv26, "D15:2")  # "Time flies"
    assert keys("Anything that stands out? Time flies!") == []
    # after anything else the -s form is still a plural noun
    assert keys("Kids love it. The kids do.") == ["kid"]
    assert "book" in keys("I read books about stars.")


def test_capitals_change_neither_key_nor_owner(conversations: dict[str, LoadedConversation]) -> None:
    assert keys("I love my Mom.") == keys("I love my mom.") == ["mom", "caroline's mom"]
    assert "caroline's sister" in keys("My sister is here. My Sister is great.")
    assert "book" in keys("I read Books daily.") and "books" not in keys("I read Books daily.")
    assert "mom" in {m.key for m in find_mentions("I love my Mom.", "Caroline") if m.type == "other"}
    # a real name keeps its key and its type; "the Wolves" (a team) and "the wolves" meet
    assert ("melanie", "person") in {(m.key, m.type) for m in find_mentions("Thanks, Melanie!", "Caroline", "Melanie")}
    assert "wolf" in keys_of(conversations["43"], "D12:20")  # "The Wolves are my team for sure."


def test_a_hyphen_or_dotted_initials_keep_a_name_whole(conversations: dict[str, LoadedConversation]) -> None:
    assert split_entities("Mary-Kate and Ashley came over.").names == ["Mary-Kate", "Ashley"]
    assert split_entities("I met Jean-Luc today.").names == ["Jean-Luc"]
    assert split_entities("A quote by J.K. Rowling that I like").names == ["J.K. Rowling"]
    assert split_entities("I moved to the U.S. last year.").names == ["U.S."]
    assert keys("Mary-Kate and Ashley came over.") == ["mary kate", "ashley"]  # the key normalise gives the name
    assert keys("I met Jean-Luc today.") == ["jean luc"]
    conv42, conv43 = conversations["42"], conversations["43"]
    assert {"spider man"} <= keys_of(conv42, "D15:2") & keys_of(conv42, "D15:3")  # "Is Spider-Man your favorite"
    assert not {"spider", "man"} & keys_of(conv42, "D15:3")
    assert "counter strike" in keys_of(conv42, "D1:7")  # "Counter-Strike: Global Offensive"
    assert {"j k rowling"} <= keys_of(conv43, "D15:10") & keys_of(conv43, "D15:11")  # was only "j"
