"""The LLM-judge score: a chat model labels each answer CORRECT or WRONG.

Used only when a chat model is configured (offline runs report no judge
score rather than a made-up one). The criteria are AMA's (LoCoMo evaluation,
temperature 0): generous on wording and date formats, strict on the fact.
The judge's own calls are tallied apart from the systems' costs.
"""

from __future__ import annotations

from typing import Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field
from strata.agents.llm import ask_json, chat_model
from strata.agents.wire import new_question
from strata.evaluation.usage import Usage, track_usage
from strata.graph.context import Context
from strata.prompts.evaluation import JUDGE_SYSTEM, JUDGE_USER

Label = Literal["CORRECT", "WRONG"]


class JudgeReply(BaseModel):
    """The judge's output contract."""

    reason: str = ""
    label: Label = Field(..., description="CORRECT or WRONG.")


class AnswerJudge:
    """Grades answers with the configured chat model at temperature 0."""

    def __init__(self, model: str, base_url: str = "", chat_model_object: BaseChatModel | None = None) -> None:
        self.context = Context(
            namespace="evaluation", mode="ask", model=model, base_url=base_url, temperature=0.0,
            chat_model=chat_model_object,
        )
        self.model = chat_model(self.context)
        self.name = model
        self.usage = Usage()
        self.unreadable = 0

    @classmethod
    def configured(cls, model: str, base_url: str = "") -> AnswerJudge | None:
        """A judge when a model is named, None offline."""
        if not model.strip() or model.strip().lower() == "offline":
            return None
        return cls(model, base_url)

    def grade(self, question: str, gold: str, answer: str) -> Label | None:
        """CORRECT or WRONG; None when the model's reply could not be read (counted in `unreadable`)."""
        if self.model is None:
            return None
        user = JUDGE_USER.format(question=question, gold=gold, answer=answer or "(no answer)")
        new_question(self.context)  # every grade gets the full call budget
        with track_usage() as tally:
            parsed, _, _ = ask_json(self.model, JUDGE_SYSTEM, user, JudgeReply, self.context)
        self.usage = self.usage.plus(tally.usage)
        if parsed is None:
            self.unreadable += 1
            return None
        return parsed.label
