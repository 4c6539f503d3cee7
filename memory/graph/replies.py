"""Shapes of the chat model's replies for the memory graph (validated by `agents.llm.parse_json`).

Each follows the JSON contract its prompt in prompts/graph.py asks for; fields a
model tends to omit have defaults, and a reply that does not fit is refused
(the offline policy then writes the links instead).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints, field_validator
from strata.memory.graph.entities import ENTITY_TYPES

# Text a record or an answer is made of: spaces around it go, and nothing but spaces is refused ("   " is no
# fact, title, summary or answer; the offline policy stands in).
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ModelEntity(BaseModel):
    name: str = Field(..., min_length=1)
    type: str = "other"

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: object) -> object:
        text = str(value or "other").strip().lower()
        text = {"organization": "organisation", "place/location": "place", "location": "place"}.get(text, text)
        return text if text in ENTITY_TYPES else "other"


class ModelLink(BaseModel):
    id: str = Field(..., min_length=1)
    strength: float = Field(0.5, ge=0, le=1)


class ModelEvolution(BaseModel):
    id: str = Field(..., min_length=1)
    tags: list[str] = Field(default_factory=list)
    context: str = ""


class ModelNote(BaseModel):
    """A-MEM's note, links and evolution for one turn."""

    entities: list[ModelEntity] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    context: str = Field(..., min_length=1)
    links: list[ModelLink] = Field(default_factory=list)
    evolve: list[ModelEvolution] = Field(default_factory=list)


class ModelCausalLink(BaseModel):
    cause: str = Field(..., min_length=1)
    effect: str = Field(..., min_length=1)
    confidence: float = Field(0.5, ge=0, le=1)
    reason: str = ""


class ModelCausal(BaseModel):
    """MAGMA's slow-path inference over one neighbourhood."""

    links: list[ModelCausalLink] = Field(default_factory=list)


class ModelSummary(BaseModel):
    """AdaMem's merge prompt output for one topic or persona group."""

    title: Text
    content: Text
