"""Word forms: which dictionary words a written word may stand for ("sold" -> sell, "kids" -> kid).

The entity graph needs a word's part of speech and lemma to tell "painting" the
activity from "painting" the object; the Judge's offline filter needs "sold" and
"sell" to meet; a date without a year needs to know whether its sentence is in
the past ("went"). All read lemminflect's English lexicon (shipped in its wheel,
no download) through this one cached lookup, so they agree on word forms.
"""

from __future__ import annotations

from functools import lru_cache

from lemminflect import getAllLemmas, getInflection
from strata.memory.entities import plain_words, stem
from strata.memory.names import unaccented


@lru_cache(maxsize=50_000)
def lemmas(word: str) -> dict[str, tuple[str, ...]]:
    """The word's lemmas by part of speech ({"VERB": ("sell",)}); empty for a word the lexicon lacks."""
    return dict(getAllLemmas(word))


@lru_cache(maxsize=50_000)
def forms(word: str) -> frozenset[str]:
    """Everything a lowercase word may stand for: its light stem, each lemma, and each lemma's stem.

    Two words share a meaning when their forms meet: "sold" -> {sold, sell}, "selling" -> {sell}.
    Names and words the lexicon lacks keep their stem alone (what BM25 would match), and a word with accents
    its stem without them too: "Emile", typed without the accent, meets "Émile"."""
    out = {stem(word), stem(unaccented(word))}
    for found in lemmas(word).values():
        for lemma in found:
            out.update((lemma.lower(), stem(lemma.lower())))
    return frozenset(out)


def text_forms(text: str) -> frozenset[str]:
    """The union of the forms of a text's words: what a question word must meet to be 'in' the text."""
    return frozenset().union(*(forms(w) for w in plain_words(text)))


@lru_cache(maxsize=50_000)
def past_tense(word: str) -> bool:
    """Whether a lowercase word is a verb's simple past ("went", "turned"), and not also an adjective
    ("excited", "married": "I'm so excited" is not about the past)."""
    return "ADJ" not in lemmas(word) and past_form(word)


@lru_cache(maxsize=50_000)
def past_form(word: str) -> bool:
    """Whether a lowercase word can be a verb's simple past, an adjective too or not ("left", "went")."""
    return any(word in (getInflection(lemma, "VBD") or ()) for lemma in lemmas(word).get("VERB", ()))


@lru_cache(maxsize=50_000)
def plural_noun(word: str) -> bool:
    """Whether a lowercase word is a noun's plural ("kids", "children"), so what it names may be several."""
    return any(word != lemma and word in (getInflection(lemma, "NNS") or ()) for lemma in lemmas(word).get("NOUN", ()))
