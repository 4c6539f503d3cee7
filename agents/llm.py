"""The chat-model side of every role: choosing the model and getting its JSON.

Every role asks the model for one JSON object matching a pydantic schema (AMA's
appendix gives each role's output contract). Where the model offers structured
output (`with_structured_output`: a JSON schema, or a forced tool call) the
role's schema is sent with the request; otherwise, or when what comes back does
not validate, the reply's text is read by a tolerant parser (JSON in prose or
code fences, trailing commas, Python literals). Calls go through `agents.wire`:
retries with backoff on rate limits and server errors, a timeout, and a cap per
question. When nothing usable comes back `ask_json` returns None and the role
falls back to its offline policy, so a bad reply, a prompt the server refuses
(a content filter, a prompt too long for the model) or a model that is down
never crashes a run or loses a turn; the policy label it returns says which
path produced the output.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import threading
import time
import weakref
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError
from strata.agents.common import fallback_policy, model_label, model_policy_name
from strata.agents.deadline import client_settings
from strata.agents.wire import (
    CAP_REACHED,
    RETRY_AFTER_CEILING,
    RETRY_AFTER_TOTAL,
    UNAVAILABLE,
    backoff,
    budget_of,
    error_chain,
    is_quota,
    is_rejection,
    is_transient,
    retry_after,
    status_of,
)
from strata.graph.context import Context
from strata.memory.errors import ConfigError, StrataError, shown_value, unstorable

Schema = TypeVar("Schema", bound=BaseModel)

# clients built per (model, base_url, temperature, timeout), each with a hash of the API keys it was built with
_MODELS: dict[tuple[str, str, float, float], tuple[str, BaseChatModel]] = {}
_LOCK = threading.Lock()
# models whose server refused a structured request and then answered it in text: later calls send plain text
_TEXT_ONLY: dict[int, weakref.ref[BaseChatModel]] = {}
# models whose server has answered a structured request: it supports them, so a later 400 is about the prompt
_STRUCTURED_OK: dict[int, weakref.ref[BaseChatModel]] = {}
# models whose server has answered any request: a 400 on its first request may be a setting (a proxy's unknown
# model), one after it has answered is about the prompt it was sent
_ANSWERED: dict[int, weakref.ref[BaseChatModel]] = {}
# client errors that may depend on the prompt: a filter, a prompt too long, a request the server cannot process
_PROMPT_STATUS = frozenset({400, 413, 422})
# error codes (or phrases of the message) that name the prompt itself as the problem
_PROMPT_CODE = re.compile(r"content_filter|content_policy_violation|context_length_exceeded|"
                          r"string_above_max_length|invalid_prompt|prompt is too long", re.IGNORECASE)
# error codes of a 400 that no prompt can cause: a setting to fix
_CONFIG_CODES = frozenset({"unsupported_parameter", "unsupported_value", "model_not_found", "invalid_api_key",
                           "invalid_model"})
# words of an error that blame the structured part of a request (its response_format, its tools)
_ABOUT_STRUCTURED = re.compile(r"response_format|json_schema|tool", re.IGNORECASE)
# exception types that say code is wrong wherever they come from: no reply's content raises them (an
# AssertionError is not one: a client asserts what it expects of a reply, as openai's stream helper does)
_BUGS = (NameError, ImportError, NotImplementedError, RecursionError)
_LOG = logging.getLogger(__name__)
# providers whose client takes `timeout` and `max_retries` (retries are ours: the client's own are turned off)
_CLIENT_SETTINGS = frozenset({"openai", "azure_openai", "anthropic"})
# providers whose client takes an httpx client: one with a deadline per call (`agents.deadline`)
_DEADLINE_CLIENT = frozenset({"openai", "azure_openai"})
TEXT = "text"
# the longest reply the text parser reads: many times the longest any role can give (20 records of 8,000
# characters, with its reasoning before them); a longer one is a model stuck in a loop
MAX_REPLY_CHARS = 1_000_000
REFUSED = "the model refused to answer"  # a reply that is a refusal (OpenAI's `refusal` field), not an empty one


def chat_model(context: Context) -> BaseChatModel | None:
    """The configured chat model, or None for the offline policies."""
    if context.chat_model is not None:
        return context.chat_model  # type: ignore[no-any-return]
    if context.offline():
        return None
    key = (context.model.strip(), context.base_url.strip(), float(context.temperature), float(context.model_timeout))
    keys = _keys_print()
    with _LOCK:
        cached = _MODELS.get(key)
        if cached is None or cached[0] != keys:
            _MODELS[key] = (keys, _init(*key))
        return _MODELS[key][1]


def _keys_print() -> str:
    """A hash (never the keys) of the environment's API keys and tokens: a client is built again once one
    changed, so a key set after a 401 (a notebook, a server reloading its secrets) is the one sent."""
    import hashlib

    return hashlib.sha256(json.dumps(sorted(_environment_secrets().items())).encode()).hexdigest()


def _environment_secrets() -> dict[str, str]:
    """The environment's API keys and tokens (variables named ...KEY or ...TOKEN), by name: what a rebuilt
    client may send (`_keys_print`) and what no message may quote (`masked`)."""
    return {n: v for n, v in os.environ.items() if n.upper().endswith(("KEY", "TOKEN"))}


def _forget(model: BaseChatModel) -> None:
    """Drop a client its provider refused (a 401): the next call builds it again, with the key set by then."""
    with _LOCK:
        for key in [k for k, (_, cached) in _MODELS.items() if cached is model]:
            del _MODELS[key]


def _init(spec: str, base_url: str, temperature: float, timeout: float) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise ConfigError(f"model {shown_value(spec)} is not provider:model: set model (STRATA_MODEL) like "
                          "'openai:gpt-4o-mini'")
    kwargs: dict[str, Any] = {"temperature": temperature}
    if provider in _CLIENT_SETTINGS:
        kwargs.update(timeout=timeout, max_retries=0)
    if provider in _DEADLINE_CLIENT:
        kwargs.update(client_settings(timeout))  # model_timeout limits the whole call, not each read
    if base_url:
        kwargs["base_url"] = base_url
        if provider == "openai":
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
    waited = 0.0  # seconds spent on the server's Retry-After, bounded per call (wire.RETRY_AFTER_TOTAL)
    in_text_after_refusal = False
    while True:
        budget = budget_of(context) if context is not None else None
        if budget is not None and budget.down:
            problem = f"{UNAVAILABLE} earlier in this run ({budget.down})"
            return None, problem, fallback_policy(problem)
        if budget is not None and not budget.take():
            problem = f"{CAP_REACHED} ({budget.limit} calls for this question)"
            return None, problem, fallback_policy(problem)
        try:
            outcome = _call(model, messages, schema, method)
        except StrataError:
            raise
        except Exception as exc:
            if _is_bug(exc):
                raise
            refused = _refusal(exc, method, _remembered(_STRUCTURED_OK, model), _remembered(_ANSWERED, model))
            if refused:
                return None, refused, fallback_policy(refused)
            if method != TEXT and is_rejection(exc):
                notes.append(f"{method} refused (HTTP {status_of(exc)})")
                method, in_text_after_refusal = TEXT, _rejects_structured(exc)
                continue
            if not is_transient(exc):
                failed = _client_failure(exc)
                if failed is None:
                    if status_of(exc) == 401 and context is not None and context.chat_model is None:
                        _forget(model)
                    raise _unreachable(exc, context) from exc
                return None, failed, fallback_policy(failed)
            retries = context.model_retries if context is not None else 0
            asked = retry_after(exc)
            wait = backoff(attempt, context.model_backoff if context is not None else 0.0, asked, waited)
            if attempt >= retries or wait is None:
                code = status_of(exc)
                why = f"HTTP {code}" if code is not None else f"{type(exc).__name__}: {_first_line(exc)}"
                why += f"; gave up after {attempt} retries" if wait is not None else f"; {_too_long(asked, waited)}"
                if budget is not None:
                    budget.down = why
                problem = f"{UNAVAILABLE} ({why})"
                return None, problem, fallback_policy(problem)
            time.sleep(wait)
            waited += wait if asked is not None else 0.0
            attempt += 1
            continue
        outcome, method = outcome
        _remember(_ANSWERED, model)
        if method != TEXT:
            _remember(_STRUCTURED_OK, model)
        elif in_text_after_refusal and not _remembered(_STRUCTURED_OK, model):
            # the server refused structured output and took the same prompt in text: it has none, ask in text
            # from now on (a server that answered structured requests before refused only this role's schema;
            # a 404 that does not name the structured part, a router's blip, makes no downgrade)
            _remember(_TEXT_ONLY, model)
        parsed, problem, path = _read(outcome, schema, method)
        if parsed is not None:
            return parsed, "", _label(name, method, path, notes)
        return None, problem, fallback_policy(problem)


def _too_long(asked: float | None, waited: float) -> str:
    """Why a Retry-After was not waited for: one too long, or the call's waits on it used up."""
    if asked is not None and asked > RETRY_AFTER_CEILING:
        return "its Retry-After is too long"
    return f"its Retry-After waits would pass {RETRY_AFTER_TOTAL:.0f} s in all (waited {waited:.0f} s)"


def _rejects_structured(exc: Exception) -> bool:
    """Whether a refused structured request shows the server has no structured output (so that, once the text
    request is answered, the model is asked in text from then on): a 400, 415 or 422 that names no setting,
    or any refusal that names the structured part (`response_format`, `tools`). A 404 that names neither is
    not proof (a router's blip, a model still loading): that one call goes on in text, the next asks
    structured again."""
    if _ABOUT_STRUCTURED.search(_error_text(exc)):
        return True
    return status_of(exc) != 404 and _error_code(exc) not in _CONFIG_CODES


def _remember(registry: dict[int, weakref.ref[BaseChatModel]], model: BaseChatModel) -> None:
    """Note a model in a registry by weak reference, so that a model dropped by its app is not kept alive."""
    registry[id(model)] = weakref.ref(model)


def _remembered(registry: dict[int, weakref.ref[BaseChatModel]], model: BaseChatModel) -> bool:
    """Whether this model (not another that reused a dead one's id) is in the registry."""
    ref = registry.get(id(model))
    return ref is not None and ref() is model


def _refusal(exc: Exception, method: str, answered_structured: bool, answered: bool) -> str:
    """Why the server refused this prompt (`refused (400 content_filter)`), or "" when the refusal may not be
    about the prompt.

    A 400, 413 or 422 is about the prompt when its code says so (a content filter, a context too long), when
    it is a 413, when the request was already plain text and the server has answered a request before (on
    the first one, a bare 400 may be a setting: a proxy's unknown model), or when the server has answered
    structured requests before and the error does not blame the structured part. Such a refusal comes back
    on every try of the same prompt, so it is an unusable reply for that one call: the role falls back and
    the run goes on.
    Other refusals stay configuration errors (or a switch to text for a structured request)."""
    status = status_of(exc)
    if status not in _PROMPT_STATUS:
        return ""
    code = _error_code(exc)
    if code in _CONFIG_CODES:
        return ""
    about_prompt = (status == 413 or bool(_PROMPT_CODE.fullmatch(code)) or (method == TEXT and answered)
                    or (answered_structured and not _ABOUT_STRUCTURED.search(_error_text(exc))))
    if not about_prompt:
        return ""
    return f"refused ({status} {code})" if code else f"refused (HTTP {status})"


def _error_code(exc: BaseException) -> str:
    """The provider's error code (`content_filter`), else a prompt problem its message names; "" if neither."""
    for candidate in error_chain(exc):
        code = getattr(candidate, "code", None)
        if isinstance(code, str) and code.strip() and not code.strip().isdigit():
            return code.strip()
    found = _PROMPT_CODE.search(_error_text(exc))
    return found.group(0).lower() if found else ""


def _error_text(exc: BaseException) -> str:
    """The messages (and `param`, when the client gives one) of an error and its causes, to search."""
    parts: list[str] = []
    for candidate in error_chain(exc):
        parts += [str(candidate), str(getattr(candidate, "param", None) or "")]
    return " ".join(parts)


def _is_bug(exc: Exception) -> bool:
    """A programming error of ours, to be raised as it is (traceback and all) instead of read as a bad reply.

    A client that fails on a broken response raises whatever its parser hit: KeyError('choices'), a
    ValueError, and as often a TypeError or AttributeError (openai's parser iterates `choices: None`). Those
    come from the client's code, are about one reply, and become unusable output (logged with their
    traceback). An error whose innermost frame is strata's own code (`_call`, or our code the client calls
    back) is our bug whatever its type, and a NameError, ImportError, NotImplementedError or RecursionError is
    a bug wherever it comes from: reading those as bad replies would hide them behind offline fallbacks on
    every call, so they are raised. An AssertionError raised in the client is about the reply it asserts on
    (openai's stream helper asserts a stream held a completion: a server that sent no event, or one JSON
    body to a streamed request), so it is the model's failure like the others."""
    if isinstance(exc, _BUGS):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return isinstance(module, str) and module.startswith("strata.")


def _client_failure(exc: Exception) -> str | None:
    """Why the client gave no reply when it failed without an HTTP error (a response it could not read), as an
    unusable reply; None for what no other prompt would change (an HTTP error, a missing key, a refused
    permission, an unknown model, a local OSError): those are configuration errors."""
    status = status_of(exc)
    name = type(exc).__name__
    if status is not None and not 200 <= status < 300:
        return None
    if isinstance(exc, OSError) or any(word in name for word in ("Auth", "Permission", "NotFound")):
        return None
    if "Refusal" in name:
        return REFUSED
    if "Length" in name or "ContentFilter" in name:  # openai's LengthFinishReasonError (its text is a usage repr)
        why = "the reply was cut off at the length limit" if "Length" in name else "the content filter cut the reply"
    else:
        why = f"the client could not read the reply ({name}: {_first_line(exc)})"
    # one line per reply (a server logs it for every truncated reply); the traceback only when debugging
    _LOG.warning("the chat model's reply is unusable (%s); the role falls back", why)
    _LOG.debug("the chat model's client failed on a reply", exc_info=exc)
    return why


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
    if _remembered(_TEXT_ONLY, model):
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
        _remember(_TEXT_ONLY, model)
        return model.invoke(messages), TEXT
    return runnable.invoke(messages), method


def _read(outcome: Any, schema: type[Schema], method: str) -> tuple[Schema | None, str, str]:
    """Validate the structured result; else read the raw reply (content, or the tool call's arguments) as text.
    A reply the server did not finish is not read at all (`_cut_short`)."""
    whole = outcome if isinstance(outcome, BaseMessage) else outcome.get("raw") if isinstance(outcome, dict) else None
    cut = _cut_short(whole) if isinstance(whole, BaseMessage) else ""
    if cut:
        return None, cut, TEXT
    if isinstance(outcome, BaseMessage):
        parsed, problem = parse_json(_text_of(outcome), schema)
        return parsed, REFUSED if parsed is None and _is_refusal(outcome) else problem, TEXT
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
    return None, REFUSED if _is_refusal(raw) else problem or "empty reply", TEXT


def _is_refusal(message: BaseMessage) -> bool:
    """Whether the reply is the model's refusal (OpenAI sends it in `refusal`, the Responses API as a block)."""
    if message.additional_kwargs.get("refusal"):
        return True
    blocks = message.content if isinstance(message.content, list) else []
    return any(isinstance(block, dict) and block.get("type") == "refusal" for block in blocks)


# stop reasons that say the reply was cut: a token limit (OpenAI `length`, Anthropic `max_tokens`, the Responses
# API's `max_output_tokens`, Gemini `MAX_TOKENS`) or a content filter that stopped it midway
_CUT_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length", "content_filter"})


def _cut_short(message: BaseMessage) -> str:
    """Why the server did not finish this reply, or "" when it did (or its client does not say).

    Half an object can still validate (a Judge `{"Action": "Pass", "` with the default confidence, a fact cut
    mid-word), so a cut reply is unusable whatever it holds. A provider's stop reason says so (`length`,
    `max_tokens`, `content_filter`). A streamed OpenAI reply has none when the stream ended early: the
    connection closed, or `[DONE]` came before the last event. The client then hands over what arrived,
    parsed in partial mode, and only the missing finish reason tells. A whole OpenAI reply always has one
    (the Responses API says `status: completed` instead)."""
    metadata = message.response_metadata or {}
    details = metadata.get("incomplete_details")
    reasons = [metadata.get(key) for key in ("finish_reason", "stop_reason", "done_reason")]
    reasons.append(details.get("reason") if isinstance(details, dict) else None)
    for reason in reasons:
        if isinstance(reason, str) and reason.lower() in _CUT_REASONS:
            return f"the reply was cut short (stop reason {reason})"
    if metadata.get("status") == "incomplete":
        return "the reply was cut short (status incomplete)"
    if metadata.get("model_provider") == "openai" and not metadata.get("finish_reason") \
            and metadata.get("status") != "completed" and not _whole_json(message):
        return "the reply ended without a finish reason (a stream cut short)"
    return ""


_FENCED = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.DOTALL)


def _whole_json(message: BaseMessage) -> bool:
    """Whether the reply's text is one whole JSON object (a fence and a reasoning block aside). Some
    OpenAI-compatible servers never send a finish reason; a reply cut short cannot end as a whole object, so
    such a reply is read, where every reply of theirs fell back. A tool call's arguments arrive already parsed
    (a cut one parsed in partial mode), so a tool call without a finish reason is still not read."""
    text = _without_thinking(_text_of(message)).strip()
    fenced = _FENCED.match(text)
    try:
        return isinstance(json.loads(fenced.group(1) if fenced else text), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def _raw_texts(raw: BaseMessage) -> list[str]:
    """What a raw reply holds that may be JSON: tool-call arguments (valid or not), then the content."""
    texts: list[str] = []
    if isinstance(raw, AIMessage):
        texts += [json.dumps(call.get("args", {})) for call in raw.tool_calls]
        texts += [str(call.get("args") or "") for call in raw.invalid_tool_calls]
    texts.append(_text_of(raw))
    return [t for t in texts if t.strip() and t.strip() != "{}"] or [""]


def _text_of(message: BaseMessage) -> str:
    """The reply's text. A reply may be a list of content blocks (Anthropic with thinking, the OpenAI
    Responses API, Gemini): only its text blocks are the answer, so LangChain's `.text` joins those and
    leaves reasoning, signatures and tool-use blocks out (read as JSON, the block list hid the answer)."""
    return str(message.text)


def parse_json(text: str, schema: type[Schema]) -> tuple[Schema | None, str]:
    """Find the JSON object in a reply (fences, prose around it, braces in the prose) and validate it.

    A reasoning model's `<think>` block is left out first: a draft it holds is not the answer. Of the objects
    left, the last one that validates wins (a fenced one before any other): a model that writes several
    writes its final answer last, after its drafts or working. An object that sets none of the schema's fields
    (`{"content": ...}` from the prose, where every field has a default) is taken only when nothing else
    validates. When none fits, the problem reported is that of the object that would have been taken."""
    if not text or not text.strip():
        return None, "empty reply"
    if len(text) > MAX_REPLY_CHARS:
        return None, f"the reply is too long ({len(text):,} characters; {MAX_REPLY_CHARS:,} at most are read)"
    answer = _without_thinking(text)
    if not answer.strip():
        return None, "no answer after the reply's reasoning (<think> block)"
    parsed, problem = _best_object(answer, schema)
    if parsed is None and answer != text:  # a tag quoted inside the answer's own text ("... </think> ...")
        again, _ = _best_object(text, schema)
        if again is not None:
            return again, ""
    return parsed, problem


def _best_object(answer: str, schema: type[Schema]) -> tuple[Schema | None, str]:
    """The last object of the text that validates and sets a field, else one that validates, else why not."""
    first_problem = ""
    fallback: Schema | None = None
    for candidate in _objects(answer):
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
        if parsed is not None and parsed.model_fields_set:
            return parsed, ""
        if parsed is not None and fallback is None:
            fallback = parsed
        first_problem = first_problem or problem
    if fallback is not None:
        return fallback, ""
    return None, first_problem or "no JSON object in the reply"


_THINK_TAG = re.compile(r"<(?:(think|thinking)|/(think|thinking)\s*)>", re.IGNORECASE)  # an opening or closing tag
_THINKING_END = re.compile(r"</(?:think|thinking)\s*>", re.IGNORECASE)
_THINKING_START = re.compile(r"\s*<(?:think|thinking)>", re.IGNORECASE)


def _without_thinking(text: str) -> str:
    """The reply without its reasoning: `<think>...</think>` and `<thinking>...</thinking>` blocks (DeepSeek-R1
    and QwQ behind vLLM or Ollama put them in the content). A closing tag left alone (a chat template that puts
    the opening one in the prompt) ends the reasoning; an opening one never closed at the start of the reply
    (a reply cut off while thinking) leaves no answer.

    Each opening tag is paired with the first closing tag of its name after it, in one pass over the tags: a
    search for each opening tag's end ran to the end of the reply for every tag never closed (64 KB of them
    took 5 s)."""
    tags = list(_THINK_TAG.finditer(text))
    closing: dict[str, list[int]] = {"think": [], "thinking": []}
    for n, tag in enumerate(tags):
        if tag.group(2):
            closing[tag.group(2).lower()].append(n)
    seen = {"think": 0, "thinking": 0}  # per name, the closing tags already passed
    kept: list[str] = []
    cursor = 0
    for n, tag in enumerate(tags):
        if not tag.group(1) or tag.start() < cursor:
            continue
        name = tag.group(1).lower()
        after = closing[name]
        while seen[name] < len(after) and after[seen[name]] < n:
            seen[name] += 1
        if seen[name] == len(after):
            continue
        kept += [text[cursor : tag.start()], " "]
        cursor = tags[after[seen[name]]].end()
    text = "".join(kept) + text[cursor:]
    ends = list(_THINKING_END.finditer(text))
    if ends:
        text = text[ends[-1].end():]
    return "" if _THINKING_START.match(text) else text


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
    which JSON can escape) or holds a NUL (`\\u0000`) makes the reply unusable, as no store can hold it.
    Blank text is each field's own concern (`memory.graph.replies.Text`): some fields fall back one by one."""
    if isinstance(value, str):
        if unstorable(value) is not None:
            raise _UnusableText("the reply holds text no store can hold (a NUL or a lone surrogate)")
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


def _objects(text: str) -> list[str]:
    """The reply's JSON-looking objects, best first: the fenced ones, last first, then each balanced `{...}`
    from the last to the first (the final answer comes after any draft)."""
    fenced = _fenced(text)
    balanced = [text[start:end] for start, end in _balanced(text)]
    return list(dict.fromkeys([*reversed(fenced), *reversed(balanced)]))  # a fenced one is balanced too: once


_STRUCTURE = re.compile(r'\\.|[{}"]', re.DOTALL)  # what moves the parser: braces, quotes, and escaped characters
_RESCANS = 3  # times at most the parser reads the rest again, from a brace that was inside a string


def _balanced(text: str) -> list[tuple[int, int]]:
    """Where each balanced `{...}` of the text is, in order, outermost only (braces inside strings are skipped).

    An object is looked for from each opening brace, its strings read from there: after one that closes, from
    the next brace after it; after one never closed (a truncated reply, a stray brace in prose), from the next
    brace inside it. Reading from each such brace to the end took time in the square of the length (126 KB of
    `{"ids": [` took over two minutes), so one pass (`_scan`) pairs every brace it meets outside a string, and
    only a brace it met inside one (after a stray brace and a quote in prose) is read again, a few times at
    most."""
    spans: list[tuple[int, int]] = []
    start = text.find("{")
    closes, quoted = _scan(text, start) if start != -1 else ({}, set())
    rescans = _RESCANS
    while start != -1:
        if start in quoted and rescans:
            rescans -= 1
            closes, quoted = _scan(text, start)
        end = closes.get(start)
        if end is not None:
            spans.append((start, end))
        start = text.find("{", end if end is not None else start + 1)
    return spans


def _scan(text: str, begin: int) -> tuple[dict[int, int], set[int]]:
    """One pass from the brace at `begin`, with a stack of the braces still open: where each brace met outside
    a string closes, and the braces met inside a string."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    quoted: set[int] = set()
    in_string = False
    for found in _STRUCTURE.finditer(text, begin):
        token = found.group()
        if token[0] == "\\":
            if in_string:
                if token[1] == "{":
                    quoted.add(found.end() - 1)
                continue
            if token[1] not in '{}"':
                continue
            token = token[1]  # outside a string a backslash escapes nothing
        if in_string:
            if token == "{":
                quoted.add(found.start())
            in_string = token != '"'
        elif token == '"':
            in_string = bool(opened)  # a quote in the prose between objects starts no string
        elif token == "{":
            opened.append(found.end() - 1)
        elif opened:
            closes[opened.pop()] = found.end()
    return closes, quoted


_FENCE_OPENS = re.compile(r"```(?:json)?\s*\{")
_FENCE_CLOSES = re.compile(r"\}\s*```")


def _fenced(text: str) -> list[str]:
    """Each object in a code fence (```json {...} ```), in order: from an opening fence to the first closing
    brace right before a fence, in one pass over both (a search from each opening fence to the end of the
    text took time in the square of the length on a reply of fences never closed)."""
    closers = [(m.start(), m.end()) for m in _FENCE_CLOSES.finditer(text)]
    objects: list[str] = []
    k = resume = 0
    for opener in _FENCE_OPENS.finditer(text):
        if opener.start() < resume:
            continue
        brace = opener.end() - 1
        while k < len(closers) and closers[k][0] <= brace:
            k += 1
        if k == len(closers):
            break
        objects.append(text[brace : closers[k][0] + 1])
        resume = closers[k][1]
    return objects


def _repair(candidate: str) -> str:
    """Common slips: trailing commas, single quotes, Python literals."""
    fixed = re.sub(r",\s*([}\]])", r"\1", candidate)
    fixed = re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", re.sub(r"\bNone\b", "null", fixed)))
    if '"' not in fixed:
        fixed = fixed.replace("'", '"')
    return fixed


def _first_line(exc: BaseException) -> str:
    """The start of an error's message, as quoted in errors and policy labels, with what may be a secret left
    out (`masked`): a provider's message can hold the key it was sent."""
    return masked((str(exc).strip().splitlines() or [""])[0])[:160]


# what may be a secret in a provider's message: a bearer token, a key (`sk-...`, whole or masked as OpenAI
# shows it), or a long run of base64 or hex
_SECRET = re.compile(r"(?P<bearer>\bbearer\s+)\S+|\b(?:sk|pk|rk)-[^\s\"'`,;()<>\[\]]+|[A-Za-z0-9+/=_*-]{16,}",
                     re.IGNORECASE)
_SECRET_RUN = re.compile(r"[A-Za-z0-9+=]{16,}")  # 16 characters of base64 (hex included) with no separator
HIDDEN = "[hidden]"


def masked(text: str) -> str:
    """The text with each key-like token left out whole (`[hidden]`): a bearer token, an `sk-` key, a masked
    one (`****`), a run of 16 or more base64 characters holding a digit and a letter; and the API keys of the
    environment wherever they are. Model names and words (`gpt-4o-mini-2024-07-18`, `context_length_exceeded`)
    stay."""
    for value in _environment_secrets().values():
        if len(value) >= 12 and value in text:
            text = text.replace(value, HIDDEN)

    def hide(found: re.Match[str]) -> str:
        token = found.group(0)
        if found.group("bearer"):
            return found.group("bearer") + HIDDEN
        if token[:3].lower() in ("sk-", "pk-", "rk-") or "****" in token:
            return HIDDEN
        runs = _SECRET_RUN.findall(token)
        secret = any(re.search(r"\d", run) and re.search(r"[A-Za-z]", run) for run in runs)
        return HIDDEN if secret else token

    return _SECRET.sub(hide, text)


def _unreachable(exc: Exception, context: Context | None) -> ConfigError:
    """The one-line error of a call no retry or other prompt would change. A refused key or permission is
    said without the provider's message: that message shows the key (OpenAI's masked form, a gateway's echo of
    all of it), and the error is printed, saved by a checkpointer and returned by a server."""
    name = type(exc).__name__
    where = f"the chat model {context.model}" if context and context.model else "the chat model given as chat_model"
    status = status_of(exc)
    said = f"{name}, HTTP {status}" if status is not None else name
    if status == 401 or "Auth" in name:
        return ConfigError(f"{where} failed: the provider refused the API key ({said}): set the provider's API key "
                           "(e.g. OPENAI_API_KEY)")
    if status == 403 or "Permission" in name:
        return ConfigError(f"{where} failed: the key may not use this model ({said}): give the key's organisation "
                           "or project access to the model, or set another model (STRATA_MODEL)")
    if is_quota(exc):
        return ConfigError(f"{where} failed: the provider's quota is used up ({said} "
                           f"{_error_code(exc) or 'insufficient_quota'}): check the account's plan and billing, "
                           "or leave model empty for offline")
    if "Connection" in name or "Timeout" in name or "connect" in str(exc).lower():
        hint = "check base_url (STRATA_BASE_URL) and that the server is up, or leave model empty for offline"
    elif "NotFound" in name:
        hint = "fix model (STRATA_MODEL): the server does not know that model"
    else:
        hint = "check model (STRATA_MODEL) and base_url (STRATA_BASE_URL), or leave model empty for offline"
    return ConfigError(f"{where} failed ({name}: {_first_line(exc)}): {hint}")
