"""The Working role: a short answer from the validated evidence, with its sources (AdaMem Working Agent).

AdaMem's Working Agent (section 3.4) turns what research found into the final
concise answer; MAGMA hands the answerer a linearised context in which every item carries its
reference id, so the answer can cite the dialogue turns it rests on. Only the
evidence is used: when it does not hold what was asked, the answer is
"Not in memory." (LoCoMo's adversarial questions ask about things never said,
often about the other participant).

Offline, an extractive reader does the job: it classifies the question, scores
every evidence sentence by the question's content words and by whether it is
about the person asked about, and cuts the answer out of the best sentence:
a resolved absolute date for "when", a number for "how many", a place for
"where", a name for "who", else the shortest span that covers what was asked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from langgraph.runtime import Runtime
from pydantic import Field
from strata.agents.common import (
    OFFLINE,
    QuestionType,
    classify,
    current_turn_text,
    format_evidence,
    traced,
)
from strata.agents.llm import ask_json, chat_model
from strata.graph.context import Context
from strata.graph.state import Evidence, State, validate_turns
from strata.memory.dates import day_label, resolve_relative
from strata.memory.entities import (
    CHAT_WORDS,
    MONTH_WORDS,
    STOPWORDS,
    WEEKDAY_WORDS,
    split_entities,
    stem,
    tokenize,
    wordset,
)
from strata.memory.facts import asks, asks_sentence, single_valued, split_sentences, stated_before_tag
from strata.memory.forgetting import is_confirmation, is_request
from strata.memory.graph.replies import Ids, Line, Reply, collected
from strata.memory.lemmas import plural_noun, text_forms
from strata.memory.moments import local
from strata.memory.names import unaccented
from strata.memory.speakers import resolve_participant
from strata.prompts import working as prompts

NOT_IN_MEMORY = "Not in memory."
REMEMBERED = "Noted: I will remember that."  # chat's reply to a turn that tells (`told`)

_NOW = datetime(2000, 1, 1)  # anchor for finding date spans where none counts (a question, an undated item)
_QUESTION_PHRASE = re.compile(
    r"^\W*(?:when|where|who|whom|whose|why|what|which|how (?:many|much|often|long|old|far)|how)\b"
    r"(?:\s+(?:kind|kinds|type|types|sort) of)?", re.IGNORECASE,
)
# A what/which question about what something is called ("What is Ann's sister's name?", "What is the
# name of her dog?", "What is the project called?"). A sentence that gives the asked-about thing a name
# ("My sister Jane ...") holds the naming words without saying them, and the answer is that name
# (`name_answer`).
_NAME_FRAME = re.compile(r"^\W*(?:what|which)\b.*\b(?:names?|named|called)\b", re.IGNORECASE)
_NAME_WORDS = frozenset(stem(w) for w in ("name", "names", "named", "called"))
# "What city ...", "Which countries ...": the kind of place asked for, held by a sentence that names a place.
_PLACE_KINDS = frozenset(stem(w) for w in ("city", "cities", "country", "countries", "town", "towns", "state",
                                           "states", "place", "places"))
# A name given right after a noun, owned by someone or not: "my sister Jane", "a puppy named Coco",
# "our dog, Rex", "my dog's name is Max". The one pattern every reader of such names uses (`named_nouns`).
_NAMED = re.compile(
    r"(?P<owner>\b(?i:my|our|his|her|their|your))?(?(owner)\s+(?:[a-z]+\s+)?|\b)(?P<noun>[a-z]+)"
    r"(?:['’]s\s+name\s+(?:is|was)|,?\s+(?:named|called|(?:is|was)\s+(?:named|called)))?,?\s+"
    r"(?P<name>[A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})(?=\W|$)"
)
# More names after a plural noun's first: "two kids, Lily and Max".
_AND_NAME = re.compile(r"(?:,\s*(?:and\s+)?|\s+and\s+)([A-Z][\w-]*)\b")
# "Her name's Coco", "His name is Max": a name given to what the sentence before spoke of.
_PRONOUN_NAMED = re.compile(
    r"\b(?i:her|his|its|their)\s+names?(?:['’]s|\s+(?:is|are|was|were))\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})"
)
# "I'm Bob", "my name is Bob", "call me Bob": the speaker gives their own name.
_SELF_NAMED = re.compile(
    r"\b(?:I['’]m|I\s+am|[Mm]y\s+name(?:['’]s|\s+is)|[Cc]all\s+me)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\b"
)
_NOT_GIVEN = STOPWORDS | CHAT_WORDS | MONTH_WORDS | WEEKDAY_WORDS  # "my birthday Sunday" gives no name
MIN_COVERAGE = 0.5  # share of the question's weighted content words the best sentence must hold
CONTEXT_SHARE = 0.5  # weight of asked-about words found elsewhere in the sentence's item
PAIR_SHARE = 0.8  # weight of asked-about words in the question the sentence's turn answers
RELATED_SHARE = 0.8  # weight of a word that states the same relation ("moved to" for "lives")
ASKING_FACTOR = 0.35  # a question in the evidence scores this share of an equal statement
MAX_ANSWER_WORDS = 12
# Question words that say little about what is asked: they count, but lightly.
_LIGHT = frozenset(
    stem(w)
    for w in wordset(
        """go went gone going make made take took get feel felt think thought want wanted do did recently usually
        often ever kind type sort time day year month week thing things way lot part new old first last plan
        planning planned start started happen happened also still use used describe mention mentioned say said
        tell told"""
    )
    | CHAT_WORDS
)
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|us|our|ours)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(you|you're|you've|your|yours|yourself)\b", re.IGNORECASE)
_NEGATIVE = re.compile(r"\b(not|never|no|n't|don't|didn't|doesn't|isn't|wasn't|won't|can't|haven't|hasn't)\b",
                       re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\s+[-–—]+\s+|\n+")
_CLAUSE = re.compile(r"\s*(?:[,;:]|\band\b|\bbut\b|\bso\b)\s*")
_CAUSE = re.compile(r"\b(?:because(?: of)?|since|'cause|cause|so that)\s+(.+)", re.IGNORECASE)
_PURPOSE = re.compile(r"\b(?:as|to)\s+(.+)", re.IGNORECASE)  # a weaker sign of a reason: only when no cause is said
_PLACE_NAME = r"((?:the\s+)?[A-Z][\w'-]*(?:\s+(?:of\s+)?[A-Z][\w'-]*)*)"  # "Paris", "the Bay of Biscay"
_PLACE = re.compile(r"\b(?:in|at|to|from|near|into|around|visit(?:ed|ing)?)\s+" + _PLACE_NAME)
_ORIGIN = re.compile(r"\bfrom\s+" + _PLACE_NAME)  # where someone came from, not where they are
_ASKS_ORIGIN = re.compile(r"\b(?:from|before|originally|grow up|grew up|born|used to|previously)\b", re.IGNORECASE)
_PLACE_NOUNS = wordset(
    """beach park lake mountain mountains forest city town village museum school church library cafe restaurant
    shelter center centre office hospital gym studio club camp farm garden home house river island country coast
    countryside conference festival concert parade store shop market trail canyon desert zoo hometown state"""
)
_COMMON_PLACE = re.compile(
    r"\b(?:in|at|to|from|near|into)\s+((?:the|a|an|my|our|his|her|their)\s+(?:\w+\s+){0,2}?"
    rf"(?:{'|'.join(sorted(_PLACE_NOUNS))}))\b",
    re.IGNORECASE,
)
_NUMBER_WORDS = wordset(
    """one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
    eighteen nineteen twenty thirty forty fifty hundred once twice couple few several"""
)
_NUMBER = re.compile(
    r"\b(\d+(?:[.,]\d+)?|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")\b(?:\s+([a-z]+))?",
    re.IGNORECASE,
)
_REACTION = re.compile(r"\b(?:sounds?|looks?|seems?)\s+(?:like\s+)?(?:so\s+|really\s+|super\s+)?\w+", re.IGNORECASE)
# Words that state the same relation as an asked-about word (stems): "moved to Denver" answers "where ... live".
_RELATED: dict[str, frozenset[str]] = {
    stem(word): frozenset(stem(r) for r in related.split())
    for word, related in (
        ("live", "move moved relocate relocated settle settled home"),
        ("work", "job employ employed hire hired career"),
        ("job", "work works working employ employed career"),
        ("married", "wed wedding husband wife spouse"),
        ("study", "studies studying student major school college university"),
    )
}
_PRESENT = re.compile(r"\b(?:does|do|is|are|now|currently|these days)\b", re.IGNORECASE)
_PAST = re.compile(r"\b(?:did|was|were|used to|before|previously|first)\b", re.IGNORECASE)
_HEAD = re.compile(
    r"^(?:what|which)\s+(?:(?:kind|kinds|type|types|sort|sorts)\s+of\s+)?([a-z]+)\s+"
    r"(?:did|does|do|is|are|was|were|has|have|had|can|could|would|will)\b",
    re.IGNORECASE,
)
# Words a noun phrase does not reach back across: determiners, prepositions, light verbs.
_NP_BARRIER = wordset(
    """a an the my our his her their your this that these those some its of for to with at in on from about by
    lots lot got get have has had is are was were am i we you they he she it"""
)
_VERBISH = frozenset(stem(w) for w in wordset("creating making building doing getting having being about"))
_PHRASE_STOP = wordset("and but because since which that who when while so if it i we they he she you is was are were")
_TAIL_STOP = re.compile(
    r"\s(?:is|was|are|were|has|have|had|will|would|can|could|which|that|who|because|since|when|while|if|"
    r"it|it's|i|i'm|we|they|he|she|you|really|so|too)\b", re.IGNORECASE,
)
_LEADING_FILLER = re.compile(
    r"^(?:(?:(?:i|we|you|they|he|she|it|that|there)['’](?:m|ve|re|d|ll|s)|a|an|the|some|my|our|his|her|their|its|that|this|these|those|it|is|was|were|are|been|be|of|for|about|"
    r"to|with|on|in|at|by|and|but|so|just|really|very|also|too|all|me|i|we|you|he|she|they|them)\b\s*)+",
    re.IGNORECASE,
)


# --- the model's output contract ---------------------------------------------------------------
class ModelAnswer(Reply):
    """A brief answer and the dialogue ids it rests on (one id, null or a number is read as the Judge reads them)."""

    answer: Line
    cited_ids: Ids = Field(default_factory=list)


# --- the node ------------------------------------------------------------------------------
def working(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Write the answer from state.evidence only, citing the turns used; ends the run."""
    question = asked(state, runtime.context).strip()
    evidence = list(state.evidence)
    window = state.plan.days if state.plan is not None else None  # Research's reading of the question
    model = chat_model(runtime.context)
    cuts: list[str] = []
    chat = runtime.context.mode == "chat"
    if model is None or not evidence:
        # offline, a statement's words are no question to cut an answer for: it is acknowledged
        answer, cited = (NOT_IN_MEMORY, []) if chat and not asks(question) else \
            answer_offline(question, evidence, window)
        policy = OFFLINE
    else:  # a model may reply to what it was told in its own words
        with collected() as cuts:
            answer, cited, policy = _answer_with_model(question, evidence, runtime, window)
    if chat and answer == NOT_IN_MEMORY and (not asks(question) or tells_too(question)):
        answer = told(question, state)  # what it told was stored: it is no lookup that found nothing
    summary = f"answered {answer!r} from {len(evidence)} evidence items, citing {', '.join(cited) or 'nothing'}"
    if cuts:
        summary += f"; cut from the model's reply: {'; '.join(cuts)}"
    return {"answer": answer, "cited_ids": cited, "stage": "done", "trace": traced(state, "working", policy, summary)}


def told(text: str, state: State) -> str:
    """The reply to a chat turn that tells rather than asks (`asks`, the rule the write path reads turns by,
    or `tells_too`), where an answer would be "Not in memory.": its words were stored, or it asked to
    forget, and the reply says which."""
    forgotten = sum(change.action == "delete" for change in state.changes)
    if forgotten:
        return f"Forgot {forgotten} record(s)."
    if is_request(text) or is_confirmation(text):
        return "Nothing was forgotten."  # the run's notes say why
    return REMEMBERED


def tells_too(text: str) -> bool:
    """Whether a turn that asks also states something before a tag ("I moved to Denver, did you know?"), read as
    the write path reads it (`stated_before_tag`; a statement about the listener only asks them to confirm)."""
    return any(stated_before_tag(s) is not None and not asks_sentence(s) for s in split_sentences(text))


def asked(state: State, context: Context) -> str:
    """What to answer: the question in ask mode, the newest turn in chat (a thread keeps older inputs)."""
    if context.mode == "ask" and state.question.strip():
        return state.question
    if context.mode == "chat" and state.turns:
        return validate_turns(state.turns[-1:])[0].text  # a server dict checked as the Memory role checks it
    return current_turn_text(state, context.mode)


def _answer_with_model(
    question: str, evidence: list[Evidence], runtime: Runtime[Context], window: tuple[date, date] | None
) -> tuple[str, list[str], str]:
    model = chat_model(runtime.context)
    assert model is not None
    user = prompts.ANSWER_USER.format(evidence=format_evidence(evidence), question=question)
    parsed, _, policy = ask_json(model, prompts.ANSWER_SYSTEM, user, ModelAnswer, runtime.context)
    if parsed is None:  # no usable reply (a blank answer is one: `Line`)
        offline_answer, cited = answer_offline(question, evidence, window)
        return offline_answer, cited, policy
    answer = " ".join(parsed.answer.split())
    if _abstains(answer):
        return NOT_IN_MEMORY, [], policy
    cited = citations(parsed.cited_ids, evidence) or supporting(answer, evidence)
    return answer, cited, policy


def citations(ids: list[str], evidence: list[Evidence]) -> list[str]:
    """The dialogue ids a model cited, kept only when they belong to the evidence (record ids map to their turns)."""
    turns_of: dict[str, list[str]] = {}
    for item in evidence:
        for key in (item.id, *item.turn_ids()):
            turns_of.setdefault(key, item.turn_ids())
    cited: list[str] = []
    for raw_id in ids:
        key = str(raw_id).strip().strip("[]")
        for turn_id in turns_of.get(key, []):
            if turn_id in turns_of and turn_id not in cited:
                cited.append(turn_id)
    return cited


def supporting(answer: str, evidence: list[Evidence]) -> list[str]:
    """When a model cites nothing usable: the turns of the items sharing the most words with its answer."""
    words = set(tokenize(answer))
    overlap = [(len(words & set(tokenize(item.text))), item) for item in evidence]
    best = max((n for n, _ in overlap), default=0)
    if best == 0:
        return []
    return list(dict.fromkeys(t for n, item in overlap if n == best for t in item.turn_ids()))


def _abstains(answer: str) -> bool:
    low = answer.lower().strip(" .!")
    return low in {"not in memory", "unknown", "none", "n/a", "no answer"} or low.startswith("not in memory")


# --- the offline reader --------------------------------------------------------------------
@dataclass
class Question:
    """What the reader needs to know about a question."""

    text: str
    type: QuestionType
    people: list[str]  # participants the question is about
    weights: dict[str, float]  # content stems -> weight
    window: tuple[date, date] | None = None  # a period the question names ("in October 2023")
    name: bool = False  # it asks what something is called (`_NAME_FRAME`)

    @property
    def total(self) -> float:
        return sum(self.weights.values())


@dataclass
class Candidate:
    """One evidence sentence, scored against the question."""

    item: Evidence
    sentence: str
    about: set[str]
    coverage: float = 0.0
    person: float = 1.0
    score: float = 0.0
    grounded: bool = False  # holds an asked-about word itself, or answers the question that held it
    asks: bool = False  # a question or a reaction: it echoes the other speaker's words, it rarely answers
    matched: set[str] = field(default_factory=set)


def analyse(question: str, evidence: list[Evidence], window: tuple[date, date] | None = None) -> Question:
    """Question type, the participants it names, the period it names, and its content words by specificity.

    The period is `window` when given: Research resolved the question's dates against the conversation's
    own "now", so "in March" and "last week" count, not only dates that name their year."""
    people = known_people(evidence)
    named = [p for p in people if _names(question, p)]
    name_stems = {unaccented(stem(part)) for p in people for part in tokenize(p)}  # "Emile" names Émile too
    kind = classify(question)
    dates = resolve_relative(question, _NOW)
    words = question
    for found in reversed(dates):  # a date in the question is a filter, not a word the answer must contain
        words = words[: found.char_start] + " " + words[found.char_end :]
    asked = _QUESTION_PHRASE.sub(" ", words)
    name = bool(_NAME_FRAME.match(question))
    documents = [set(tokenize(f"{item.text} {item.label}")) for item in evidence] or [set()]
    weights: dict[str, float] = {}
    for token in dict.fromkeys(tokenize(asked)):
        bare = unaccented(token)
        if bare in name_stems or any(unaccented(p.lower()).startswith(bare) and len(bare) >= 3 for p in people):
            continue
        if token in _LIGHT:
            weights[token] = 0.3
            continue
        seen = sum(token in doc for doc in documents)
        # Rarer words in the evidence are the specific thing asked about; unseen words still count fully.
        weights[token] = 1.0 + math.log((len(documents) + 1) / (seen + 1)) / 2
    if not named and _FIRST_PERSON.search(question):
        named = _asker(evidence)
    stated = [d for d in dates if not d.relative]
    period = (min(d.start for d in stated), max(d.end for d in stated)) if stated else None
    if window is not None:
        period = window
    return Question(text=question, type=kind, people=named, weights=weights, window=period, name=name)


def _asker(evidence: list[Evidence]) -> list[str]:
    """Who "I" in a question is: the one speaker of the evidence besides the assistant (an app's user asking
    about themselves); nobody when several people speak (then "I" could be any of them)."""
    speakers = {part.strip() for item in evidence for part in item.speaker.split(",") if part.strip()}
    humans = [s for s in speakers if s.lower() != "assistant"]
    return humans if len(humans) == 1 else []


def _names(question: str, person: str) -> bool:
    """The question names the person: in full, by a first or last name, or by a short form ("Mel" for
    Melanie), with or without the name's accents (`resolve_participant`)."""
    return bool(resolve_participant(question, [person]))


def known_people(evidence: list[Evidence]) -> list[str]:
    """The participants the evidence speaks of: its speakers, longest names first."""
    names: list[str] = []
    for item in evidence:
        for part in item.speaker.split(","):
            name = part.strip()
            if name and name.lower() not in ("user", "assistant") and name not in names:
                names.append(name)
    return sorted(names, key=len, reverse=True)


def sentences(item: Evidence) -> list[str]:
    """The item's text cut into sentences, plus the caption of a shared photo."""
    parts = [s.strip() for s in _SENTENCE.split(item.text) if s and _substantive(s) and not _greeting(s)]
    caption = re.search(r"\[shared a photo: (.+)\]\s*$", item.label)
    if caption:
        parts.append(f"shared {caption.group(1).strip()}")
    return parts or [item.text]


def _greeting(sentence: str) -> bool:
    """Chit-chat: nothing but chat words and names ("Thanks, Mel!", "Wow, Caroline, congrats!")."""
    for match in re.finditer(r"[A-Za-z][A-Za-z'’]*", sentence):
        word = match.group()
        low = word.lower()
        if low in STOPWORDS or low in CHAT_WORDS:
            continue
        vocative = word[0].isupper() and (match.start() > 0 or sentence[match.end() : match.end() + 1] == ",")
        if not vocative:
            return False
    return True


def about(sentence: str, item: Evidence, people: list[str]) -> set[str]:
    """Who a sentence is about: names it mentions (not as a greeting), else the speaker or the one addressed.
    A sentence whose subject is someone the speaker names ("My sister Jane lives nearby") is about them,
    not about the speaker, unless the speaker comes in again ("My sister Jane and I ...")."""
    mentioned = {p for p in people if _mentions(sentence, p)}
    if item.kind != "raw":
        return mentioned or ({item.speaker} if item.speaker in people else set())
    subjects = set(mentioned)
    other = _named_subject(sentence)
    if other and not _FIRST_PERSON.search(sentence[other.end:]):
        return subjects
    if _FIRST_PERSON.search(sentence) or not (mentioned or _SECOND_PERSON.search(sentence)):
        subjects.add(item.speaker)
    if _SECOND_PERSON.search(sentence):
        others = [p for p in people if p != item.speaker]
        if len(others) == 1:
            subjects.add(others[0])
    return subjects


def _mentions(sentence: str, person: str) -> bool:
    """A name used as a subject or object, not as a vocative ("Thanks, Mel!", "Wow, Caroline!"); written
    with its accents or without them."""
    name, sentence = re.escape(unaccented(person)), unaccented(sentence)
    for match in re.finditer(rf"\b{name}\b", sentence, re.IGNORECASE):
        before, after = sentence[: match.start()].rstrip(), sentence[match.end() :].lstrip()
        vocative_after = not after or after[0] in ",!?."
        vocative_before = not before or before[-1] in ",!?." or re.search(r"\b(hey|hi|hello|thanks|wow|oh)$",
                                                                          before, re.IGNORECASE)
        if vocative_after and vocative_before:
            continue
        if after.startswith(("'s", "’s")) or not vocative_after or not vocative_before:
            return True
    return False


def candidates(question: Question, evidence: list[Evidence]) -> list[Candidate]:
    """Every evidence sentence with its coverage of the question and its person match, best first.

    A sentence's own words count fully; the rest of its item, and the question
    that the item answers (the other speaker's previous turn), count in part:
    in dialogue the answer often leaves out what the question said.
    """
    people = known_people(evidence)
    by_turn = {item.dialogue_id: item for item in evidence if item.kind == "raw" and item.dialogue_id}
    newest = max((e.time for e in evidence if e.time), default=None)
    total = question.total or 1.0
    found: list[Candidate] = []
    for item in evidence:
        in_item = text_forms(item.text)
        asked_before = _previous_question(item, by_turn)
        in_pair = text_forms(asked_before.text) if asked_before is not None else frozenset()
        for position, sentence in enumerate(sentences(item)):
            cand = Candidate(item=item, sentence=sentence, about=about(sentence, item, people))
            own = set(text_forms(sentence))  # "Raj left" holds the "leave" of "When did Raj leave?"
            if question.name and (_PRONOUN_NAMED.search(sentence) or self_names(question, sentence)
                                  or any(noun in question.weights for noun, _ in given_names(sentence))):
                own |= _NAME_WORDS
            if question.type == "where" and _PLACE.search(sentence):
                own |= _PLACE_KINDS
            cand.matched = {t for t in question.weights if t in own}
            related = {t for t in question.weights if t not in own and _RELATED.get(t, frozenset()) & own}
            paired = {t for t in question.weights if t in in_pair and t not in own}
            around = {t for t in question.weights if t in in_item and t not in own and t not in paired}
            cand.grounded = bool(cand.matched or paired or related)
            cand.coverage = (
                _weight(question, cand.matched)
                + RELATED_SHARE * _weight(question, related)
                + PAIR_SHARE * _weight(question, paired)
                + CONTEXT_SHARE * _weight(question, around)
            ) / total
            cand.person = person_match(question, cand)
            cand.asks = echoes(sentence)
            cand.score = cand.coverage * cand.person * (ASKING_FACTOR if cand.asks else 1.0)
            cand.score += _type_bonus(question, cand) + _window_bonus(question, item)
            cand.score += 0.02 * (item.kind in ("fact", "persona")) + _recency(item.time, newest)
            cand.score += 0.01 / (1 + position)
            found.append(cand)
    return sorted(found, key=lambda c: (-c.score, len(c.sentence)))


def _weight(question: Question, words: set[str]) -> float:
    """The question's weights of `words`, summed in the question's order: summed in a set's order, which
    each process's hash seed decides, a coverage of exactly MIN_COVERAGE came out a hair above or below."""
    return sum(weight for word, weight in question.weights.items() if word in words)


def echoes(sentence: str) -> bool:
    """A question, or a reaction to what the other speaker said ("That charity race sounds great!"); a
    statement before a tag question ("I moved to Denver, right?") states, as the facts read it."""
    if asks_sentence(sentence):
        return True
    return bool(_REACTION.search(sentence)) and not _FIRST_PERSON.search(sentence)


def _previous_question(item: Evidence, by_turn: dict[str, Evidence]) -> Evidence | None:
    """The other speaker's turn just before a raw turn, when it is in the evidence and asks something.
    Dialogue ids end in the turn's number ("D3:7" follows "D3:6"; an app's "T12" follows "T11")."""
    match = re.fullmatch(r"(.*?)(\d+)", item.dialogue_id or "")
    if item.kind != "raw" or match is None:
        return None
    before = by_turn.get(f"{match.group(1)}{int(match.group(2)) - 1}")
    if before is None or before.speaker == item.speaker or "?" not in before.text:
        return None
    return before


def _window_bonus(question: Question, item: Evidence) -> float:
    """Items said within a period the question names ("in October 2023") are preferred."""
    said = item.local_time()
    if question.window is None or said is None:
        return 0.0
    first, last = question.window
    day = said.date()  # differences of days, not shifted bounds: a window may start on 1 January 1
    return 0.15 if (first - day).days <= 7 and (day - last).days <= 7 else 0.0


def person_match(question: Question, cand: Candidate) -> float:
    """1 when the sentence is about the person asked about, low when it is about someone else only."""
    if not question.people:
        return 1.0
    if cand.about & set(question.people):
        return 1.0
    return 0.7 if not cand.about else 0.25


def _type_bonus(question: Question, cand: Candidate) -> float:
    """A sentence holding the kind of thing asked for (a date, a number, a place, a name) is preferred."""
    kind = question.type
    if question.name and name_answer(question, cand):
        return 0.05
    if kind == "when" and _has_date(cand.sentence):
        return 0.05
    if kind == "how_many" and _NUMBER.search(cand.sentence):
        return 0.05
    if kind == "where" and (_PLACE.search(cand.sentence) or _COMMON_PLACE.search(cand.sentence)):
        return 0.05
    if kind == "who" and person_answer(question, cand):
        return 0.05
    return 0.0


def _has_date(sentence: str) -> bool:
    return bool(resolve_relative(sentence, datetime(2000, 1, 1)))


def _recency(moment: datetime | None, newest: datetime | None) -> float:
    """A tie-breaker for the newer of two equally good items (the latest state wins)."""
    if moment is None or newest is None:
        return 0.0
    days = max(0.0, (newest - moment).total_seconds() / 86400)
    return 0.01 / (1 + days / 30)


def asks_current_value(question: Question) -> bool:
    """A present-tense question about a property that holds one value at a time (where one lives, one's job)."""
    if not _PRESENT.search(question.text) or _PAST.search(question.text):
        return False
    return asks_one_value(question)


def asks_one_value(question: Question) -> bool:
    """Whether a question names a property that holds one value at a time (lives, works, age ...)."""
    return any(single_valued(word) for word in re.findall(r"[a-z]+", question.text.lower()))


def value_then(question: Question) -> Callable[[Evidence], bool] | None:
    """For a question about a property that holds one value at a time, which statements can tell its value at
    the time asked (None for other questions): now, when it asks the current value (statements not superseded);
    in the period it names (statements said by the period's last day and not superseded before its first)."""
    if question.window is None:
        if not asks_current_value(question):
            return None
        return lambda item: item.until is None
    if not asks_one_value(question):
        return None
    first, last = question.window

    def held(item: Evidence) -> bool:
        said, until = item.local_time(), local(item.until, item.utc_offset)
        return said is not None and said.date() <= last and (until is None or until.date() > first)

    return held


def answer_offline(
    question: str, evidence: list[Evidence], window: tuple[date, date] | None = None
) -> tuple[str, list[str]]:
    """The extractive answer and the dialogue ids it came from, or "Not in memory.". `window` is the period
    the question asks about as Research resolved it, in the speaker's days (`Plan.days`: the days an item's
    `local_time` falls on, not the UTC-widened `Plan.time_window`); without it only dates that name their
    year count."""
    if not question or not evidence:
        return NOT_IN_MEMORY, []
    parsed = analyse(question, evidence, window)
    ranked = candidates(parsed, evidence)
    if not ranked or not parsed.weights:
        return NOT_IN_MEMORY, []
    statements = [c for c in ranked if not c.asks and c.grounded]
    best = statements[0] if statements else ranked[0]
    held = value_then(parsed)
    if held is not None:
        # "Where does Ann live?", "Where did Ann live in October 2023?": of the statements that answer it, the
        # latest one said by then holds the value then; one superseded before then (shown for a time it held)
        # does not, nor does one said after it
        answering = [c for c in statements if c.coverage >= MIN_COVERAGE and c.person == 1.0 and c.item.time
                     and held(c.item)
                     and (not parsed.name or name_answer(parsed, c))]  # a name asked: one that gives it
        best = max(answering, key=lambda c: (c.item.time, c.score), default=best)
    if best.asks or not best.grounded or best.coverage < MIN_COVERAGE or (best.person < 1.0 and best.about):
        return NOT_IN_MEMORY, []
    answer = extract(parsed, best, ranked)
    if not answer:
        return NOT_IN_MEMORY, []
    return answer, best.item.turn_ids()


def extract(question: Question, best: Candidate, ranked: list[Candidate]) -> str:
    """Cut the answer out of the best sentence, by question type."""
    kind = question.type
    if question.name:
        return name_answer(question, best, ranked) or span_answer(question, best)
    if kind == "when":
        return when_answer(question, best, ranked)
    if kind == "how_many":
        return number_answer(question, best, ranked) or span_answer(question, best)
    if kind == "where":
        # the best sentence, else another of its turn ("Can you help me plan a trip to Japan? I'm going in October")
        same_turn = [c for c in ranked if c is not best and c.item is best.item]
        speakers = {c.item.speaker for c in ranked}
        places = (place_answer(question, cand, speakers) for cand in [best, *same_turn])
        return next((p for p in places if p), "") or span_answer(question, best)
    if kind == "who":
        return person_answer(question, best) or span_answer(question, best)
    if kind == "why":
        cause = _CAUSE.search(best.sentence) or _PURPOSE.search(best.sentence)
        return _trim(cause.group(1)) if cause else span_answer(question, best)
    if kind == "yes_no":
        # the clause that holds the question's words decides: "I'm vegetarian, so please don't ..." is a yes
        return "No" if _NEGATIVE.search(best_clause(question, best.sentence)) else "Yes"
    return span_answer(question, best)


def when_answer(question: Question, best: Candidate, ranked: list[Candidate]) -> str:
    """A date the sentence states (relative ones resolved against its own date), else the date it was said."""
    turns = set(best.item.turn_ids())
    same_turn = [c for c in ranked if c is not best and set(c.item.turn_ids()) & turns and not c.asks]
    for cand in [best, *same_turn]:
        if cand.item.time is None:
            # Undated: a relative date has nothing to count from (the wall clock is no stand-in: it gave
            # "yesterday" said long ago as the day before today), so it is answered as said.
            found = resolve_relative(cand.sentence, _NOW)
            if found:
                return found[0].expression if found[0].relative else found[0].label
            continue
        found = resolve_relative(cand.sentence, cand.item.local_time() or _NOW)
        if found and question.text.lower().lstrip().startswith("how long ago"):
            return found[0].expression  # "how long ago" wants the span of time ("ten years ago")
        if found:
            return found[0].label
    said = best.item.local_time()
    if said is not None:
        return day_label(said.date())
    return ""


def number_answer(question: Question, best: Candidate, ranked: list[Candidate]) -> str:
    """A number (with its unit) from the sentence; else how many distinct supporting items there are."""
    asked_unit = re.search(r"how (?:many|much)\s+(\w+)", question.text, re.IGNORECASE)
    numbers = list(_NUMBER.finditer(best.sentence))
    if numbers:
        if asked_unit:
            unit = stem(asked_unit.group(1).lower())
            for match in numbers:
                if match.group(2) and stem(match.group(2).lower()) == unit:
                    return f"{match.group(1)} {match.group(2)}"
        match = numbers[0]
        unit_word = match.group(2)
        unit_word = unit_word if unit_word and unit_word.lower() not in STOPWORDS else None  # "turns 7 on ..."
        if question.text.lower().startswith(("how long", "how old", "how far", "how often")) and unit_word:
            return _without_dates(f"{match.group(1)} {unit_word}")  # "turned 6 yesterday": not "6 yesterday"
        return match.group(1)
    support = {c.item.dialogue_id or c.item.id for c in ranked
               if c.coverage >= MIN_COVERAGE and c.person == 1.0 and c.coverage >= best.coverage * 0.8}
    return str(len(support)) if len(support) > 1 else ""


def place_answer(question: Question, best: Candidate, speakers: Iterable[str] = ()) -> str:
    """A named place after a preposition, else any other proper name, else a common place ("the beach").
    No one who speaks in the evidence is a place ("Thanks, John!")."""
    people = [p.lower() for p in [*question.people, best.item.speaker, *speakers] if p]
    # "my husband Mark", "our dog Rex": a name given to someone's person or pet is not a place
    owned = {n.name.split()[0] for n in named_nouns(best.sentence) if n.owner and n.noun not in _PLACE_NOUNS}

    def usable(name: str) -> bool:
        first = re.sub(r"['’]s$", "", name.split()[0].lower()) if name.split() else ""
        person = first in ("the", "my", "our") or any(p.startswith(first) and len(first) >= 3 for p in people)
        when = first in _NOT_GIVEN  # "in October": a time, not a place
        person = person or name.split()[0] in owned
        return not person and not when and not set(tokenize(name)) & set(question.weights) and not _acronym(name)

    named = [m.group(1) for m in _PLACE.finditer(best.sentence)] + split_entities(best.sentence).names
    places = list(dict.fromkeys(name for name in named if usable(name)))
    if not _ASKS_ORIGIN.search(question.text):  # "moved from Chicago to Austin": where one is now is Austin
        origins = {m.group(1) for m in _ORIGIN.finditer(best.sentence)}
        places = [place for place in places if place not in origins] or places
    if places:  # "Which cities ...?": all of them ("Kyoto, Osaka, Hiroshima"); else the first
        return ", ".join(places) if re.search(r"\b(?:cities|countries|towns|states|places)\b", question.text,
                                              re.IGNORECASE) else places[0]
    common = _COMMON_PLACE.search(best.sentence)
    return _trim(common.group(1)) if common else ""


@dataclass(frozen=True)
class NamedNoun:
    """A name given right after a noun (`_NAMED`): "my little sister Jane", "a puppy named Coco"."""

    owner: str  # "my", "our", ...; "" when no one owns it
    phrase: str  # the owner with the noun, as said ("my little sister"); the noun alone when no one owns it
    noun: str
    name: str
    start: int
    end: int
    plain: bool  # the name follows the noun with nothing between but a comma ("my sister Jane", not "... named")


@lru_cache(maxsize=4096)
def named_nouns(sentence: str) -> tuple[NamedNoun, ...]:
    """Every name the sentence gives right after a noun; a function word or a month is no name, a function
    word no noun ("my birthday Sunday" names nothing). Cached: several readers ask of the same sentence."""
    found = []
    for match in _NAMED.finditer(sentence):
        noun, name = match.group("noun"), match.group("name")
        if noun in STOPWORDS or name.split()[0].lower() in _NOT_GIVEN:
            continue
        owner = match.group("owner") or ""
        phrase = sentence[match.start() : match.end("noun")] if owner else noun
        plain = not sentence[match.end("noun") : match.start("name")].strip(", \t\n")
        found.append(NamedNoun(owner, " ".join(phrase.split()), noun, name, match.start(), match.end(), plain))
    return tuple(found)


def _named_subject(sentence: str) -> NamedNoun | None:
    """Someone the speaker names as the sentence's subject: "My sister Jane lives nearby", not "My sister
    Jane's dog ..." (see `about`)."""
    first = next(iter(named_nouns(sentence)), None)
    if first is None or not first.plain or first.owner.lower() not in ("my", "our"):
        return None
    if re.search(r"\w", sentence[: first.start]):
        return None
    return None if re.match(r"['’]s\b", sentence[first.end :]) else first


def given_names(sentence: str) -> list[tuple[str, str]]:
    """(noun stem, name) for each name given right after a noun: "my sister Jane" -> ("sister", "Jane"),
    "a puppy named Coco" -> ("puppy", "Coco"), "my dog's name is Max" -> ("dog", "Max"). A plural noun
    names all that follow it joined by commas or "and": "two kids, Lily and Max" -> Lily and Max."""
    found = []
    for named in named_nouns(sentence):
        found.append((stem(named.noun), named.name))
        if plural_noun(named.noun):
            found.extend((stem(named.noun), more) for more in _coordinated(sentence, named.end))
    return found


def _coordinated(sentence: str, start: int) -> list[str]:
    """The names joined on at `start` by commas or "and" ("..., Max and Ann" -> Max, Ann)."""
    names = []
    while (match := _AND_NAME.match(sentence, start)) and match.group(1).lower() not in _NOT_GIVEN:
        names.append(match.group(1))
        start = match.end()
    return names


def name_answer(question: Question, best: Candidate, ranked: Sequence[Candidate] = ()) -> str:
    """The names the sentence gives to what the question asks about ("What is Ann's sister's name?" and
    "My sister Jane lives nearby" give "Jane"); several when it names several. When the best sentence
    names nothing, the rest of its turn may ("I got a puppy two weeks ago! Her name's Coco")."""
    people = {p.lower() for p in [*question.people, best.item.speaker] if p}
    same_turn = [c for c in ranked if c is not best and c.item is best.item]
    for cand in [best, *same_turn]:
        names = [name for noun, name in given_names(cand.sentence) if noun in question.weights]
        names = names or [m.group(1) for m in _PRONOUN_NAMED.finditer(cand.sentence)]  # "Her name's Coco"
        names = [name for name in names if name.lower() not in people] or self_names(question, cand.sentence)
        if names:
            return ", ".join(dict.fromkeys(names))
    return ""


def self_names(question: Question, sentence: str) -> list[str]:
    """The speaker's own name ("I'm Bob", "call me Bob"), when the question asks for nothing but a name
    ("What is my name?")."""
    if set(question.weights) - _NAME_WORDS:
        return []
    return [m.group(1) for m in _SELF_NAMED.finditer(sentence) if m.group(1).split()[0].lower() not in _NOT_GIVEN]


def _acronym(word: str) -> bool:
    return word.isupper() and len(word) > 1


def person_answer(question: Question, best: Candidate) -> str:
    """Who someone named in the question is to the speaker ("Who is Rex?" and "my dog Rex": "my dog"), else
    a name in the sentence other than the person asked about and the speaker, else a relation it names."""
    in_question = set(re.findall(r"\b[A-Z][a-z'’]+\b", question.text))
    given = next((n for n in named_nouns(best.sentence) if n.owner and n.name.split()[0] in in_question), None)
    if given:
        return given.phrase
    skip = {p.lower() for p in question.people} | {best.item.speaker.lower()}
    words = re.findall(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b", best.sentence)
    for name in words:
        low = name.lower()
        asked = set(tokenize(name)) <= set(question.weights)  # "Who is Jane?": not "Jane"
        usable = low not in skip and low not in _NOT_GIVEN and not asked  # "June" names no one
        if usable and (not best.sentence.startswith(name) or len(words) == 1):
            return name
    relation = re.search(r"\b(?:my|her|his|their|our)\s+((?:\w+\s+)?(?:friend|friends|mom|mother|dad|father|"
                         r"parents|sister|brother|husband|wife|partner|kids|children|family|mentor|mentors|"
                         r"grandma|grandpa|aunt|uncle|cousin|boss|coworker|colleague|team)s?)\b", best.sentence,
                         re.IGNORECASE)
    return relation.group(0) if relation else ""


def span_answer(question: Question, best: Candidate) -> str:
    """The phrase around the asked-for noun, else the words after the last asked-about word, else the clause."""
    head = head_noun(question.text)
    phrase = noun_phrase(best.sentence, head) if head else ""
    if phrase:
        return phrase
    clause = best_clause(question, best.sentence)
    kept = unnamed(question, clause)
    if not kept:  # the clause only names what is asked about: what is said of it comes next
        rest = best.sentence[best.sentence.find(clause) + len(clause) :]
        following = rest if _substantive(rest) else _next_sentence(best)
        if following and not following.rstrip().endswith("?"):
            return _trim(best_clause(question, following))
    words = (kept or clause).split()
    last = -1
    for i, word in enumerate(words):
        token = tokenize(word)
        if token and token[0] in question.weights:
            last = i
    tail = _cut(" ".join(words[last + 1 :])) if last >= 0 else ""
    if _substantive(tail):
        return tail
    if last >= len(words) - 2:
        following = _next_sentence(best)
        if following and not following.rstrip().endswith("?"):
            return _trim(best_clause(question, following))
    return _trim(clause)


def unnamed(question: Question, clause: str) -> str:
    """The clause without the names it gives to what the question asks about ("My sister Jane is a teacher"
    -> "My sister is a teacher"): the name says who it is, not what is asked of them ("What does my sister
    do?"), and it stood where the answer is cut from. Empty when nothing is left but the naming."""
    kept, start = [], 0
    for named in named_nouns(clause):
        if stem(named.noun) in question.weights:
            kept.append(clause[start : named.start] + named.phrase)
            start = named.end
    if not kept:
        return clause
    return "".join(kept) + clause[start:] if _substantive(clause[start:]) else ""


def head_noun(question: str) -> str:
    """The stem of the thing a what/which question asks for ("What kind of place ..." -> "place")."""
    match = _HEAD.match(question.strip())
    if match is None or match.group(1).lower() in STOPWORDS:
        return ""
    return stem(match.group(1).lower())


def noun_phrase(sentence: str, head: str) -> str:
    """The phrase built on the head noun: its determiner and modifiers, and a short complement.

    "Now I'm passionate about creating a safe, inviting place for people to grow"
    with head "place" gives "safe, inviting place for people to grow".
    """
    words = sentence.split()
    for i, word in enumerate(words):
        if tokenize(word)[:1] != [head]:
            continue
        start = i
        while start > 0 and i - start < 5 and words[start - 1].lower() not in _NP_BARRIER:
            if tokenize(words[start - 1]) and tokenize(words[start - 1])[0] in _LIGHT | _VERBISH:
                break
            start -= 1
        end = i + 1
        while end < len(words) and end - i <= 6 and not re.search(r"[.!?;]$", words[end - 1]):
            if words[end].lower().strip(",") in _PHRASE_STOP:
                break
            end += 1
        modifiers = start < i
        complement = end > i + 1
        if modifiers or complement:
            return _trim(" ".join(words[start:end]))
    return ""


def _without_dates(text: str) -> str:
    """A span without its time expressions ("On the Friday before 15 July 2023, Caroline went" -> "Caroline went").

    Only "when" answers are dates; facts carry resolved dates in their text, and
    those would otherwise leak into every other kind of answer.
    """
    for found in reversed(resolve_relative(text, _NOW)):
        start = found.char_start
        lead = re.search(r"(?:\b(?:on|in|during|since|by|around|from)\s+)?(?:the\s+)?$", text[:start], re.IGNORECASE)
        if lead:
            start = lead.start()
        text = text[:start] + text[found.char_end :]
    return " ".join(text.split()).strip(" ,")


def _substantive(text: str) -> bool:
    return any(t not in _LIGHT for t in tokenize(text))


def _cut(text: str) -> str:
    """A tail up to where a new predicate or clause starts ("mental health is super rewarding" -> "mental health")."""
    stop = _TAIL_STOP.search(text)
    return _trim(text[: stop.start()] if stop and _substantive(text[: stop.start()]) else text)


def _next_sentence(cand: Candidate) -> str:
    parts = sentences(cand.item)
    try:
        index = parts.index(cand.sentence)
    except ValueError:
        return ""
    return parts[index + 1] if index + 1 < len(parts) else ""


def best_clause(question: Question, sentence: str) -> str:
    """The clause of a sentence that holds most of the asked-about words (commas, 'and', 'but' split clauses)."""
    clauses = [c for c in _CLAUSE.split(sentence) if c and c.strip()]
    if len(clauses) <= 1:
        return sentence

    asked = _asked_words(question)

    def weight(clause: str) -> float:
        return sum(asked.get(t, 0.0) for t in dict.fromkeys(tokenize(clause)))

    best = max(clauses, key=lambda c: (weight(c), -len(c)))
    return best if weight(best) > 0 else sentence


def _asked_words(question: Question) -> dict[str, float]:
    """The question's content words with their weights, and the words that state the same relation
    ("work" for "job", at `RELATED_SHARE`): they tell which clause of a sentence answers."""
    asked = dict(question.weights)
    for word, weight in question.weights.items():
        for related in _RELATED.get(word, frozenset()):
            asked.setdefault(related, RELATED_SHARE * weight)
    return asked


def _trim(text: str) -> str:
    """Drop dates, leading function words and trailing punctuation; keep it short."""
    text = _without_dates(" ".join(text.split()))
    text = _LEADING_FILLER.sub("", text).strip(" .,!?;:-–—\"'")
    words = text.split()
    return " ".join(words[:MAX_ANSWER_WORDS])
