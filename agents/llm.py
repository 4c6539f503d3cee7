"""The chat-model side of every role: choosing the model and reading its JSON.

Every role asks the model for one JSON object matching a pydantic schema (AMA's
appendix gives each role's output contract). Models wrap JSON in prose or code
fences, drop fields or send wrong types; `ask_json` recovers what it can and
returns None otherwise, and the role then falls back to its offline policy, so
a malformed answer never crashes a run or loses a turn.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError
from strata.graph.context import Context
from strata.memory.errors import ConfigError

Schema = TypeVar("Schema", bound=BaseModel)

_MODELS: dict[tuple[str, str, float], BaseChatModel] = {}
_LOCK = threading.Lock()


def chat_model(context: Context) -> BaseChatModel | None:
    """The configured chat model, or None for the offline policies."""
    if context.chat_model is not None:
        return context.chat_model  # type: ignore[no-any-return]
    if context.offline():
        return None
    key = (context.model.strip(), context.base_url.strip(), float(context.temperature))
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = _init(*key)
        return _MODELS[key]


def _init(spec: str, base_url: str, temperature: float) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise ConfigError(f"model {spec!r} is not provider:model: set model (STRATA_MODEL) like 'openai:gpt-4o-mini'")
    kwargs: dict[str, Any] = {"temperature": temperature}
    if base_url:
        kwargs["base_url"] = base_url
        if provider == "openai":
            import os

            kwargs.setdefault("api_key", os.environ.get("OPENAI_API_KEY") or "not-needed")
    try:
        return init_chat_model(name, model_provider=provider, **kwargs)
    except Exception as exc:
        raise ConfigError(
            f"cannot set up model {spec!r} ({type(exc).__name__}: {_first_line(exc)}): "
            "fix model (STRATA_MODEL), install the provider package, or set its API key"
        ) from exc


def ask_json(
    model: BaseChatModel, system: str, user: str, schema: type[Schema], context: Context | None = None
) -> tuple[Schema | None, str, dict[str, int]]:
    """One model call for one JSON object: (parsed or None, why it failed, token usage)."""
    try:
        reply = model.invoke([SystemMessage(system), HumanMessage(user)])
    except ConfigError:
        raise
    except Exception as exc:
        raise _unreachable(exc, context) from exc
    usage = dict(getattr(reply, "usage_metadata", None) or {})
    text = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
    parsed, problem = parse_json(text, schema)
    return parsed, problem, {k: int(v) for k, v in usage.items() if isinstance(v, int)}


def parse_json(text: str, schema: type[Schema]) -> tuple[Schema | None, str]:
    """Find the JSON object in a reply (fences, prose around it) and validate it."""
    if not text or not text.strip():
        return None, "empty reply"
    candidate = _extract_object(text)
    if candidate is None:
        return None, "no JSON object in the reply"
    try:
        data = json.loads(candidate)
    except json.JSONDecodeError:
        try:
            data = json.loads(_repair(candidate))
        except json.JSONDecodeError as exc:
            return None, f"unreadable JSON ({exc.msg})"
    if not isinstance(data, dict):
        return None, "the reply is JSON but not an object"
    try:
        return schema.model_validate(data), ""
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "object"
        return None, f"field {where}: {first.get('msg', 'invalid')}"


def one_of(value: object, choices: dict[str, str]) -> object:
    """A model's spelling of a fixed choice ("no-op", "RETRY", "Pass.") as the canonical one; else as given,
    for the schema to reject. `choices` maps lower-case letters only to the canonical form."""
    if not isinstance(value, str):
        return value
    return choices.get(re.sub(r"[^a-z]", "", value.lower()), value)


def _extract_object(text: str) -> str | None:
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, flags=re.DOTALL)
    if fenced:
        return fenced.group(1)
    start = text.find("{")
    while start != -1:
        depth, in_string, escaped = 0, False, False
        for i in range(start, len(text)):
            char = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        start = text.find("{", start + 1)
    return None


def _repair(candidate: str) -> str:
    """Common slips: trailing commas, single quotes, Python literals."""
    fixed = re.sub(r",\s*([}\]])", r"\1", candidate)
    fixed = re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", re.sub(r"\bNone\b", "null", fixed)))
    if '"' not in fixed:
        fixed = fixed.replace("'", '"')
    return fixed


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:160]


def _unreachable(exc: Exception, context: Context | None) -> ConfigError:
    name = type(exc).__name__
    where = context.model if context and context.model else "the configured chat model"
    if "Auth" in name or "Permission" in name:
        hint = "set the provider's API key (e.g. OPENAI_API_KEY)"
    elif "Connection" in name or "Timeout" in name or "connect" in str(exc).lower():
        hint = "check base_url (STRATA_BASE_URL) and that the server is up, or leave model empty for offline"
    elif "NotFound" in name:
        hint = "fix model (STRATA_MODEL): the server does not know that model"
    else:
        hint = "check model (STRATA_MODEL) and base_url (STRATA_BASE_URL), or leave model empty for offline"
    return ConfigError(f"the chat model {where} failed ({name}: {_first_line(exc)}): {hint}")
