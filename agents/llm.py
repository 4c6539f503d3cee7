"""The chat-model side of every role: choosing the model and getting its JSON.

Every role asks the model for one JSON object matching a pydantic schema (AMA's
appendix gives each role's output contract). Where the model offers structured
output (`with_structured_output`: a JSON schema, or a forced tool call) the
role's schema is sent with the request; otherwise, or when what comes back does
not validate, the reply's text is read by a tolerant parser (JSON in prose or
code fences, trailing commas, Python literals). Calls go through `agents.wire`:
retries with backoff on rate limits and server errors, a timeout, and a cap per
question. When nothing usable comes back `ask_json` returns None and the role
falls back to its offline policy, so a bad reply or a model that is down never
crashes a run or loses a turn; the policy label it returns says which path
produced the output.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError
from strata.agents.common import fallback_policy, model_label, model_policy_name
from strata.agents.wire import (
    CAP_REACHED,
    UNAVAILABLE,
    backoff,
    budget_of,
    is_rejection,
    is_transient,
    retry_after,
    status_of,
)
from strata.graph.context import Context
from strata.memory.errors import ConfigError, shown_value

Schema = TypeVar("Schema", bound=BaseModel)

_MODELS: dict[tuple[str, str, float, float], BaseChatModel] = {}
_LOCK = threading.Lock()
# models whose server refused a structured request: later calls send plain text (id -> weak reference)
_TEXT_ONLY: dict[int, weakref.ref[BaseChatModel]] = {}
# providers whose client takes `timeout` and `max_retries` (retries are ours: the client's own are turned off)
_CLIENT_SETTINGS = frozenset({"openai", "azure_openai", "anthropic"})
TEXT = "text"


def chat_model(context: Context) -> BaseChatModel | None:
    """The configured chat model, or None for the offline policies."""
    if context.chat_model is not None:
        return context.chat_model  # type: ignore[no-any-return]
    if context.offline():
        return None
    key = (context.model.strip(), context.base_url.strip(), float(context.temperature), float(context.model_timeout))
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = _init(*key)
        return _MODELS[key]


def _init(spec: str, base_url: str, temperature: float, timeout: float) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise ConfigError(f"model {shown_value(spec)} is not provider:model: set model (STRATA_MODEL) like "
                          "'openai:gpt-4o-mini'")
    kwargs: dict[str, Any] = {"temperature": temperature}
    if provider in _CLIENT_SETTINGS:
        kwargs.update(timeout=timeout, max_retries=0)
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
) -> tuple[Schema | None, str, str]:
    """One JSON object from the model: (parsed or None, why not, the policy label of the result).

    The label is `model:<name> (<method>)` for the provider's structured output,
    `model:<name>` for the reply's text, and for a None result the offline
    fallback with its reason (output unusable, call cap reached, model unavailable).
    """
    name = model_policy_name(context) if context is not None else model_label(model)
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)]
    method = _structured_method(model, context)
    notes: list[str] = []
    attempt = 0
    while True:
        budget = budget_of(context) if context is not None else None
        if budget is not None and budget.down:
            problem = f"{UNAVAILABLE} earlier in this question ({budget.down})"
            return None, problem, fallback_policy(problem)
        if budget is not None and not budget.take():
            problem = f"{CAP_REACHED} ({budget.limit} calls for this question)"
            return None, problem, fallback_policy(problem)
        try:
            outcome = _call(model, messages, schema, method)
        except ConfigError:
            raise
        except Exception as exc:
            if method != TEXT and is_rejection(exc):
                notes.append(f"{method} refused (HTTP {status_of(exc)})")
                _TEXT_ONLY[id(model)] = weakref.ref(model)
                method = TEXT
                continue
            if not is_transient(exc):
                raise _unreachable(exc, context) from exc
            retries = context.model_retries if context is not None else 0
            wait = backoff(attempt, context.model_backoff if context is not None else 0.0, retry_after(exc))
            if attempt >= retries or wait is None:
                code = status_of(exc)
                why = f"HTTP {code}" if code is not None else f"{type(exc).__name__}: {_first_line(exc)}"
                why += f"; gave up after {attempt} retries" if wait is not None else "; its Retry-After is too long"
                if budget is not None:
                    budget.down = why
                problem = f"{UNAVAILABLE} ({why})"
                return None, problem, fallback_policy(problem)
            time.sleep(wait)
            attempt += 1
            continue
        outcome, method = outcome
        parsed, problem, path = _read(outcome, schema, method)
        if parsed is not None:
            return parsed, "", _label(name, method, path, notes)
        return None, problem, fallback_policy(problem)


def _label(name: str, method: str, path: str, notes: list[str]) -> str:
    """model:<name> for plain text, model:<name> (<method>) for structured output, and why text was read instead."""
    if path != TEXT:
        return f"{name} ({path})"
    why = [*notes, *([f"{method} output unusable"] if method != TEXT else [])]
    return f"{name} (text; {'; '.join(why)})" if why else name


def _structured_method(model: BaseChatModel, context: Context | None) -> str:
    """The structured-output method to ask for, or TEXT when the model has none (or was told not to)."""
    wanted = context.structured_output if context is not None else "auto"
    if wanted == TEXT:
        return TEXT
    ref = _TEXT_ONLY.get(id(model))
    if ref is not None and ref() is model:
        return TEXT
    if type(model).bind_tools is BaseChatModel.bind_tools and (
        type(model).with_structured_output is BaseChatModel.with_structured_output
    ):
        return TEXT  # the model implements neither tool calling nor a structured output of its own
    if wanted != "auto":
        return wanted
    parameter = inspect.signature(model.with_structured_output).parameters.get("method")
    default = parameter.default if parameter is not None else inspect.Parameter.empty
    return default if isinstance(default, str) else "structured"


def _call(model: BaseChatModel, messages: list[BaseMessage], schema: type[BaseModel], method: str) -> tuple[Any, str]:
    """One request: the structured runnable (raw reply included) or the plain model; and the method used."""
    if method == TEXT:
        return model.invoke(messages), TEXT
    # the role's pydantic contract as a JSON schema, named after it (its docstring is for readers of the code)
    json_schema = {"title": schema.__name__, **{k: v for k, v in schema.model_json_schema().items()
                                                if k not in ("title", "description")}}
    kwargs: dict[str, Any] = {"include_raw": True}
    if method != "structured":
        kwargs["method"] = method
    try:
        runnable = model.with_structured_output(json_schema, **kwargs)
    except (NotImplementedError, ValueError, TypeError):
        _TEXT_ONLY[id(model)] = weakref.ref(model)
        return model.invoke(messages), TEXT
    return runnable.invoke(messages), method


def _read(outcome: Any, schema: type[Schema], method: str) -> tuple[Schema | None, str, str]:
    """Validate the structured result; else read the raw reply (content, or the tool call's arguments) as text."""
    if isinstance(outcome, BaseMessage):
        parsed, problem = parse_json(_text_of(outcome), schema)
        return parsed, problem, TEXT
    raw = outcome.get("raw") if isinstance(outcome, dict) else None
    structured = outcome.get("parsed") if isinstance(outcome, dict) else None
    problem = ""
    if isinstance(structured, BaseModel):
        structured = structured.model_dump()
    if isinstance(structured, dict):
        parsed, problem = validated(structured, schema)
        if parsed is not None:
            return parsed, "", method
    if not isinstance(raw, BaseMessage):
        return None, problem or "no reply", TEXT
    for text in _raw_texts(raw):
        parsed, text_problem = parse_json(text, schema)
        if parsed is not None:
            return parsed, "", TEXT
        problem = problem or text_problem
    return None, problem or "empty reply", TEXT


def _raw_texts(raw: BaseMessage) -> list[str]:
    """What a raw reply holds that may be JSON: tool-call arguments (valid or not), then the content."""
    texts: list[str] = []
    if isinstance(raw, AIMessage):
        texts += [json.dumps(call.get("args", {})) for call in raw.tool_calls]
        texts += [str(call.get("args") or "") for call in raw.invalid_tool_calls]
    texts.append(_text_of(raw))
    return [t for t in texts if t.strip() and t.strip() != "{}"] or [""]


def _text_of(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else json.dumps(message.content)


def parse_json(text: str, schema: type[Schema]) -> tuple[Schema | None, str]:
    """Find the JSON object in a reply (fences, prose around it, braces in the prose) and validate it:
    each object the reply holds is tried in turn, and the first problem is reported when none fits."""
    if not text or not text.strip():
        return None, "empty reply"
    first_problem = ""
    for candidate in _objects(text):
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            try:
                data = json.loads(_repair(candidate))
            except json.JSONDecodeError as exc:
                first_problem = first_problem or f"unreadable JSON ({exc.msg})"
                continue
        if not isinstance(data, dict):
            first_problem = first_problem or "the reply is JSON but not an object"
            continue
        parsed, problem = validated(data, schema)
        if parsed is not None:
            return parsed, ""
        first_problem = first_problem or problem
    return None, first_problem or "no JSON object in the reply"


def validated(data: dict[str, Any], schema: type[Schema]) -> tuple[Schema | None, str]:
    """The reply's object as the schema, its text checked first (`_check_unicode`); else why not."""
    try:
        _check_unicode(data)
        return schema.model_validate(data), ""
    except _UnusableText as exc:
        return None, str(exc)
    except ValidationError as exc:
        return None, _validation_problem(exc)


class _UnusableText(ValueError):
    """A reply's text that no store can hold."""


def _check_unicode(value: Any) -> None:
    """Every text of a reply, checked before validation: text that is not valid Unicode (a lone surrogate,
    which JSON can escape) makes the reply unusable, as no store can hold it. Blank text is each field's
    own concern (`memory.graph.replies.Text`): some fields fall back one by one."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _UnusableText("the reply holds text that is not valid Unicode (a lone surrogate)") from None
    elif isinstance(value, dict):
        for item in value.values():
            _check_unicode(item)
    elif isinstance(value, list):
        for item in value:
            _check_unicode(item)


def _validation_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "object"
    return f"field {where}: {first.get('msg', 'invalid')}"


def one_of(value: object, choices: dict[str, str]) -> object:
    """A model's spelling of a fixed choice ("no-op", "RETRY", "Pass.") as the canonical one; else as given,
    for the schema to reject. `choices` maps lower-case letters only to the canonical form."""
    if not isinstance(value, str):
        return value
    return choices.get(re.sub(r"[^a-z]", "", value.lower()), value)


def _objects(text: str) -> Iterator[str]:
    """The reply's JSON-looking objects, best first: a fenced one, then each balanced `{...}` in order."""
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, flags=re.DOTALL)
    if fenced:
        yield fenced.group(1)
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
                    yield text[start : i + 1]
                    start = text.find("{", i + 1)  # the next object after it, not one nested in it
                    break
        else:  # never closed (a truncated reply): an object may start inside it
            start = text.find("{", start + 1)


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
    where = f"the chat model {context.model}" if context and context.model else "the chat model given as chat_model"
    if "Auth" in name or "Permission" in name:
        hint = "set the provider's API key (e.g. OPENAI_API_KEY)"
    elif "Connection" in name or "Timeout" in name or "connect" in str(exc).lower():
        hint = "check base_url (STRATA_BASE_URL) and that the server is up, or leave model empty for offline"
    elif "NotFound" in name:
        hint = "fix model (STRATA_MODEL): the server does not know that model"
    else:
        hint = "check model (STRATA_MODEL) and base_url (STRATA_BASE_URL), or leave model empty for offline"
    return ConfigError(f"{where} failed ({name}: {_first_line(exc)}): {hint}")
