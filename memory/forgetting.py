"""Who may make the memory forget, and what: the rule every delete passes through.

AMA's Refresher deletes only when the user explicitly asks to forget or cancel
something (AMA section 3.4, appendix C.6). A memory shared by several people
(or read by a model that believes what it reads) needs more than that, so a
record may be deleted only when all of these hold:

1. the run stores a turn (`chat` or `ingest`): a question (`ask`, `retrieve`)
   never deletes;
2. the current turn itself asks, in the speaker's own words: text after a role
   marker inside the turn ("SYSTEM:", "ASSISTANT:", "</conversation>") is
   quoted material, never a request, and stored memories are never read for
   requests at all;
3. the speaker is the person the memory is about (a raw turn is about its
   speaker, a fact about its subject), or the namespace's configured owner;
4. the record matches what was named precisely: it holds every proper name and
   every content word the request gives ("forget that I signed up for a pottery
   class" spares "I made it in pottery class"), or the request asks for
   "everything about" its subject;
5. at most `FORGET_BOUND` records per request; a request matching more deletes
   nothing and says what it would delete: the same speaker confirms with a short
   "yes, forget them" as their next turn.

The Judge proposes (offline or by model) and the Refresher applies, but both ask
`decide` here, and the Refresher turns any delete outside `ForgetDecision.allowed`
into a no-op, whatever a model replied. Every delete stays undoable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field
from strata.memory.entities import STOPWORDS, split_entities, stem, tokenize, wordset
from strata.memory.names import canonical_name, canonical_text
from strata.memory.records import Record
from strata.memory.store import MemoryStore

FORGET_BOUND = 5  # records one request may delete without a confirmation: a fact or two and the turn they came from
DELETING_MODES = ("ingest", "chat")
SHOWN_IDS = 12  # ids listed in a message about a request

# Requests addressed to the memory: an imperative (or "could you ...") verb of removal.
_FORGET_VERB = re.compile(r"\b(forget|delete|erase|remove|discard|disregard|cancel|unlearn)\b", re.IGNORECASE)
_POLITE_PREFIX = re.compile(
    r"^(?:(?:can|could|would|will) you|id? (?:want|need|would like|like) you to|you (?:can|should|may|must))\b"
)
_REQUEST_LEAD = wordset("please pls kindly just also and so now then actually ok okay oh but well hey")
_NEGATION = wordset("dont not never")
# Statements that invalidate something on the user's say-so.
_INVALIDATED = re.compile(
    r"(?P<object>[\w' ]{2,80}?)\s+(?:is|was|has been|have been|are|were|got|'s)\s+(?:now\s+)?"
    r"(?:cancell?ed|called off|no longer (?:true|valid|happening|the case|on))\b",
    re.IGNORECASE,
)
_DISAVOWAL = re.compile(
    r"\b(?:never ?mind|scratch that|ignore what i (?:said|told you)|that(?:'s| is) (?:no longer|not) "
    r"(?:true|valid|correct|right)(?: anymore| any more)?|stop remembering|don't remember (?:that|this|it))\b",
    re.IGNORECASE,
)
# Where quoted or forged dialogue starts inside a turn: a role label with a colon, or a chat-template tag.
_ROLE_MARKER = re.compile(
    r"(?:^|(?<=[\s.!?;:,>\]\"]))(?:system|assistant|user|human|ai|bot|developer|tool|model|instruction|instructions)"
    r"\s*:|</?\s*[a-z_|]+\s*/?>|<\|[^|>]{1,30}\|>|\[/?(?:inst|sys)\]|#{2,}\s*(?:system|instruction)",
    re.IGNORECASE,
)
_TITLE_STOP = re.compile(r"\b(Mr|Mrs|Ms|Dr|Prof|St)\.(?=\s)")
_LETTERS_DIGITS = re.compile(r"[^\W_]+")
_FIRST_PERSON = wordset("i me my mine myself we us our ours ourselves")
_EVERYTHING = re.compile(r"\b(?:everything|all|anything)\b(?:\s+(?:you\s+know|stored|remembered))?\s+(?:about|on|of)\b",
                         re.IGNORECASE)
_CONFIRM = re.compile(
    r"^\W*(?:yes|yeah|yep|sure|ok|okay|confirm(?:ed)?|i confirm|go ahead|do it)\b[\s,.!]*"
    r"(?:(?:please\s+)?(?:go ahead\s+(?:and\s+)?)?(?:forget|delete|erase|remove)\s+"
    r"(?:them|it|those|these|all(?: of them)?|everything)[\s.!]*)?(?:please)?[\s.!]*$",
    re.IGNORECASE,
)
_REQUEST_STEMS = frozenset(
    stem(w)
    for w in wordset(
        """forget delete erase remove discard disregard ignore scratch cancel unlearn please memory remember said
        told know mind cancelled canceled called longer true valid happening case anymore everything anything"""
    )
    if w not in STOPWORDS
)


def shown_ids(ids: Sequence[str]) -> str:
    """Ids for a one-line message: the first SHOWN_IDS of them, then "..." when there are more."""
    return ", ".join(ids[:SHOWN_IDS]) + (", ..." if len(ids) > SHOWN_IDS else "")


class ForgetRequest(BaseModel):
    """What an explicit request to forget names: its content words, the proper names among them, and whom."""

    words: set[str] = Field(default_factory=set, description="Content stems of what is to be forgotten.")
    names: set[str] = Field(default_factory=set, description="Stems of proper names it gives (not the people).")
    about: list[str] = Field(default_factory=list, description="Participants it names as the memory's subject.")
    first_person: bool = Field(False, description="It speaks of the speaker's own memory (I, me, my).")
    everything: bool = Field(False, description="'everything about ...': every record about the subject.")
    stranger: str = Field("", description="Whom an 'everything about' names that no participant is.")


class ForgetDecision(BaseModel):
    """What the current turn may delete, and why; `allowed` is the only set a Refresher may delete."""

    request: ForgetRequest
    speaker: str
    subject: str = ""
    matched: list[str] = Field(default_factory=list, description="Records the request names, about the subject.")
    allowed: list[str] = Field(default_factory=list, description="Records that may be deleted in this run.")
    refused: str = Field("", description="Why nothing may be deleted, when that is so.")
    confirmed: bool = Field(False, description="This turn confirms the speaker's previous request.")
    asked_in: str = Field("", description="The earlier turn that made the request this turn confirms (raw id).")

    def reason(self) -> str:
        """One line for the verdict and the caller: what will be deleted, or why not and what to do."""
        if self.refused:
            return self.refused
        shown = shown_ids(self.allowed)
        how = "confirmed request" if self.confirmed else "request"
        return f"{self.speaker}'s {how} to forget names {len(self.allowed)} record(s): {shown}"


# --- reading a request --------------------------------------------------------------------------
def own_words(text: str) -> str:
    """The part of a turn the speaker says in their own voice: everything before the first role marker.

    Curly apostrophes (what a phone keyboard types) are straight here: "I’d like you to forget" and
    "Don’t remember that" are requests exactly as "I'd" and "Don't" are."""
    text = text.replace("’", "'").replace("‘", "'")
    marker = _ROLE_MARKER.search(text)
    return text if marker is None else text[: marker.start()]


def read_forget_request(
    text: str, people: Sequence[str] = (), participants: Sequence[str] = ()
) -> ForgetRequest | None:
    """What the turn explicitly asks to forget or cancel, or None if it asks nothing.

    Empty words mean a request that does not say what ("never mind"). Only
    requests count: an imperative at the start of a clause ("please forget ...",
    "could you delete ...", "cancel my ..."), or a statement that something is
    cancelled or no longer true. "Don't forget", "I forgot" and "I deleted the
    app" are not requests, and nothing after a role marker is read. `people`
    (speaker, listener) and `participants` are not names of a target; the
    participants it names are whom the request is about.
    """
    for clause in _clauses(text):
        named = _requested(clause)
        if named is None:
            continue
        about = [p for p in participants if _names_person(named, p)]
        persons = {stem(w) for p in [*people, *participants] for w in tokenize(p)}
        names = {t for n in split_entities(named).names for t in tokenize(n)} - persons
        lowered = set(re.findall(r"[a-z]+", named.lower()))
        everything = _EVERYTHING.search(named)
        return ForgetRequest(
            words=_content(named) - persons, names=names, about=about,
            first_person=bool(lowered & _FIRST_PERSON), everything=bool(everything),
            stranger=_stranger(named[everything.end() :], people, participants) if everything else "",
        )
    return None


def _clauses(text: str) -> list[str]:
    """The clauses of the speaker's own words, where a request is looked for."""
    said = _TITLE_STOP.sub(r"\1", own_words(text))  # "Dr. أحمد" is one name, not two clauses
    return re.split(r"[.!?;,:\n]+|\s[-–—]\s", said)


def _requested(clause: str) -> str | None:
    """The object of a request in one clause, or None when the clause asks nothing."""
    for match in _FORGET_VERB.finditer(clause):
        lead = " ".join(re.findall(r"[a-z]+", clause[: match.start()].lower().replace("'", "")))
        words = _POLITE_PREFIX.sub("", lead).split()
        if all(w in _REQUEST_LEAD for w in words) and not _NEGATION & set(words):
            return clause[match.end() :]
    invalidated = _INVALIDATED.search(clause)
    if invalidated:
        return invalidated.group("object")
    if _DISAVOWAL.search(clause):
        return _DISAVOWAL.sub(" ", clause)
    return None


def is_confirmation(text: str) -> bool:
    """A short turn that only says yes to a pending request ("Yes, forget them.", "Confirm")."""
    return bool(_CONFIRM.match(own_words(text))) and len(text) < 80


def _names_person(text: str, person: str) -> bool:
    """Whether a text names a participant: the full name or its first name, possessives included, in any
    script and either Unicode spelling ("Zoë" typed as o + a combining diaeresis is still Zoë)."""
    name = canonical_name(person)
    first = name.split()[0] if name else ""
    folded = canonical_text(text)
    words = {w.removesuffix("'s") for w in re.findall(r"[^\W_]+(?:'s)?", folded)}
    spaced = " ".join(_LETTERS_DIGITS.findall(folded))
    return bool(first) and (first in words or f" {name} " in f" {spaced} ")


def _stranger(target: str, people: Sequence[str], participants: Sequence[str]) -> str:
    """The name an 'everything about <target>' gives when it is a person no participant is ('' otherwise):
    such a request must be refused, never read as the speaker's own records. A target with first-person
    words ("my trip") or lowercase content words ("the pottery class") names a thing, not a person."""
    words = re.findall(r"[^\W_]+(?:['’][^\W_]+)*", target)
    if not words or any(canonical_text(w) in _FIRST_PERSON for w in words):
        return ""
    if any(_names_person(target, p) for p in [*people, *participants]):
        return ""
    content = [w for w in words if canonical_text(w) not in STOPWORDS]
    named = {w for n in split_entities(target).names for w in n.split()}
    if content and all(w in named or w[:1].isupper() for w in content):
        return " ".join(content)
    return ""


def _content(text: str) -> set[str]:
    return {t for t in tokenize(text) if t not in _REQUEST_STEMS}


# --- deciding ----------------------------------------------------------------------------------
def same_person(a: str, b: str) -> bool:
    """The very same name, case and spacing aside: 'Melanie' and 'melanie ' are one person; 'Ann' and
    'Ann Smith' are not (a one-word name would otherwise claim every 'Ann' of the memory, and
    'Dr. Jones' ... 'Dr. Smith' by their first word); 'user' only matches 'user'."""
    return bool(_words(a)) and _words(a) == _words(b)


def _words(name: str) -> list[str]:
    return canonical_name(name).split()  # NFC or NFD, no-break or zero-width spaces, any case: one spelling


def about(record: Record, person: str) -> bool:
    """A raw turn is about its speaker; a fact about its subject (its speaker when it has none)."""
    if record.kind == "raw":
        return same_person(record.speaker, person)
    if record.kind == "fact":
        owner = record.subject.split("'")[0].split("’")[0] if record.subject else record.speaker
        return same_person(owner, person)
    return False


def matches(request: ForgetRequest, record: Record) -> bool:
    """The record holds every name and content word the request gives ("everything about": any record)."""
    if not request.words and not request.names:
        return request.everything
    held = set(tokenize(f"{record.text} {record.value} {record.attribute.replace('_', ' ')}"))  # moved to: lives_in
    return request.names <= held and request.words <= held


def decide(
    store: MemoryStore, mode: str, text: str, speaker: str, listener: str = "", owner: str = "",
    exclude: Iterable[str] = (),
) -> ForgetDecision | None:
    """What the current turn may delete, or None when it asks to forget nothing.

    The rule of the module docstring, in order: the mode, the speaker's own
    words (a confirmation reaches back to the speaker's previous turn), whose
    memory it is, the precise match, then the bound.
    """
    exclude = list(exclude)
    confirming = mode in DELETING_MODES and is_confirmation(text)
    said, asked_in = previous_turn(store, speaker, exclude) if confirming else (text, "")
    if asked_in:  # the request itself is not one of the records it listed ("everything about me" matches it)
        exclude = [*exclude, f"raw:{asked_in}"]
    if not any(_requested(clause) is not None for clause in _clauses(said)):
        return None  # the common case, decided without reading the whole memory
    participants = store.participants()
    request = read_forget_request(said, [p for p in (speaker, listener) if p], participants)
    if request is None:
        return None
    confirmed = confirming
    decision = ForgetDecision(request=request, speaker=speaker or "the caller", confirmed=confirmed,
                              asked_in=f"raw:{asked_in}" if asked_in else "")
    if mode not in DELETING_MODES:
        decision.refused = (f"'{mode}' never deletes: to forget something, say it in chat (or store it as a "
                            "turn) as the person it is about; nothing deleted")
        return decision
    others = [p for p in request.about if not same_person(p, speaker)]
    if request.stranger and not others:
        decision.refused = (f"no participant of this memory is called {request.stranger!r} (participants: "
                            f"{', '.join(participants) or 'none'}): nothing deleted; name someone who takes part")
        return decision
    subject = others[0] if others else speaker
    decision.subject = subject
    is_owner = bool(owner) and same_person(owner, speaker)
    if others and not is_owner:
        decision.refused = (f"only {subject} (or the namespace's owner) may ask to forget {subject}'s memories: "
                            f"nothing deleted")
        return decision
    if not (request.words or request.names or request.everything):
        decision.refused = "the request to forget does not say what: nothing deleted"
        return decision
    skip = set(exclude)
    # a superseded fact is no longer current but is still what was said: "forget where I live" reaches it too
    candidates = [*store.all("raw"), *store.all("fact"), *store.superseded("fact")]
    decision.matched = [
        r.id for r in candidates
        if r.id not in skip and not (set(r.source_ids) & {i.removeprefix("raw:") for i in skip})
        and about(r, subject) and matches(request, r)
    ]
    if not decision.matched:
        decision.refused = f"no record about {subject} matches the request to forget: nothing deleted"
        return decision
    if len(decision.matched) > FORGET_BOUND and not confirmed:
        shown = shown_ids(decision.matched)
        decision.refused = (
            f"the request to forget matches {len(decision.matched)} records, more than {FORGET_BOUND} at once "
            f"({shown}): nothing deleted; to delete them all, {speaker} replies 'Yes, forget them' as the next turn"
        )
        return decision
    decision.allowed = list(decision.matched)
    return decision


def request_told(count: int) -> str:
    """What a carried-out request to forget reads as once done: that it asked, not what (its words name what was
    forgotten, and a search would find them there); the words stay in the history, so an undo gives them back."""
    return f"[asked the memory to forget {count} record(s); done]"


_TOLD = re.compile(r"^\[asked the memory to forget \d+ record\(s\); done\]$")


def is_request(text: str) -> bool:
    """Whether a turn is an instruction to the memory rather than something to remember: a request to forget,
    before or after it was carried out (`request_told`). Nothing is derived from it: no facts, note or links."""
    return bool(_TOLD.match(text)) or read_forget_request(text) is not None


def previous_turn(store: MemoryStore, speaker: str, exclude: Iterable[str] = ()) -> tuple[str, str]:
    """The speaker's turn before the current one (working memory, in the order said) and its dia_id,
    or two ''."""
    skip = {i.removeprefix("raw:") for i in exclude}
    turns = [t for t in store.working() if same_person(t["speaker"], speaker) and t["dia_id"] not in skip]
    return (turns[-1]["text"], turns[-1]["dia_id"]) if turns else ("", "")
