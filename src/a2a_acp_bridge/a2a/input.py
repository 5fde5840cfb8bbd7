"""The caller's A2A message as prompt parts, within documented size budgets.

Text parts become text; a file sent inline (`raw`) or by reference (`url`) and structured
data (`data`) become the matching prompt part, which the ACP side turns into content the
agent accepts. Nothing is dropped silently: a part the bridge cannot carry, or one over the
budget, is an InvalidParams error that names it.

A message is parsed once per request (`parsed_prompt`): the request handler checks its
parts before any task exists, and the executor hands the same parts to the agent.

When the task waits for the answer to the agent's question, the caller's next message is
that answer instead (`reply_from_message`).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict

from a2a_acp_bridge.errors import BridgeError
from a2a_acp_bridge.events import QuestionAsked, QuestionReply
from a2a_acp_bridge.prompt import BlobPart, DataPart, LinkPart, PromptPart, TextPart

# Budgets for one message: an inline file, all inline files together, all text together.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FILES_BYTES = 16 * 1024 * 1024
MAX_TEXT_CHARS = 1024 * 1024


# Where a request's parsed message is kept, in its ServerCallContext.state.
PARSED_PROMPT = "a2a_acp_bridge.parsed_prompt"


class InputProblem(BridgeError):
    """The message cannot be given to the agent as it is."""


def parsed_prompt(state: MutableMapping[str, Any], message: Message) -> list[PromptPart]:
    """The message's prompt parts, parsed on the first call of a request and kept in its
    call state for the next (InputProblem when the message cannot be carried)."""
    found = state.get(PARSED_PROMPT)
    if found is not None and found[0] == message.message_id:
        parts: list[PromptPart] = found[1]
        return parts
    parts = prompt_from_message(message)
    state[PARSED_PROMPT] = (message.message_id, parts)
    return parts


def prompt_from_message(message: Message) -> list[PromptPart]:
    parts: list[PromptPart] = []
    file_bytes = 0
    text_chars = 0
    for index, part in enumerate(message.parts):
        which = part.WhichOneof("content")
        name = part.filename or f"part {index + 1}"
        if which == "text":
            if part.text.strip():
                text_chars += len(part.text)
                parts.append(TextPart(part.text))
        elif which == "raw":
            size = len(part.raw)
            if size > MAX_FILE_BYTES:
                raise InputProblem(
                    f"the file {name!r} is {size} bytes; one file may be at most {MAX_FILE_BYTES}"
                )
            file_bytes += size
            parts.append(
                BlobPart(
                    bytes(part.raw),
                    part.media_type or "application/octet-stream",
                    part.filename or None,
                )
            )
        elif which == "url":
            parts.append(LinkPart(part.url, part.media_type or None, part.filename or None))
        elif which == "data":
            data = MessageToDict(part.data)
            text_chars += len(str(data))
            parts.append(DataPart(data))
        else:
            raise InputProblem(f"{name} has no content (text, raw, url or data)")
    if file_bytes > MAX_FILES_BYTES:
        raise InputProblem(
            f"the files of this message add up to {file_bytes} bytes; "
            f"the limit is {MAX_FILES_BYTES}"
        )
    if text_chars > MAX_TEXT_CHARS:
        raise InputProblem(
            f"the text of this message is {text_chars} characters; the limit is {MAX_TEXT_CHARS}"
        )
    return parts


_YES = {"yes", "y", "true", "ok", "okay", "sure", "1"}
_NO = {"no", "n", "false", "0"}


def reply_from_message(
    message: Message, question: QuestionAsked, meta: Mapping[str, Any]
) -> QuestionReply | str:
    """The caller's message as the answer to the agent's question, or why it is not one.

    A data part (a JSON object) is the form's content. Text answers a form too: a form of
    one field takes it as that field's value (a string, a number, an integer, yes/no for a
    boolean, one of the options of a choice); in a form of several fields, text naming an
    option of exactly one choice picks it, and any other text goes to the one free-text
    field (claude-agent-acp's AskUserQuestion form: a choice and an "Other" box per
    question). A form without fields is accepted as it is, the text in `_meta.a2a.text`.
    A file cannot answer a form; required fields must be there."""
    content: dict[str, Any] = {}
    texts: list[str] = []
    for part in message.parts:
        which = part.WhichOneof("content")
        if which == "data":
            value = MessageToDict(part.data)
            if not isinstance(value, dict):
                return "a data part that answers a question must be a JSON object"
            content.update(value)
        elif which == "text":
            if part.text.strip():
                texts.append(part.text)
        else:
            return "a file cannot answer the agent's question: reply with text or a data part"
    text = "\n".join(texts).strip()
    raw_properties = question.schema.get("properties") or {}
    properties = {
        name: spec if isinstance(spec, Mapping) else {} for name, spec in raw_properties.items()
    }
    required = list(question.schema.get("required") or [])
    a2a_meta = dict(meta)
    if not content and text:
        if not properties:
            a2a_meta["text"] = text
            return QuestionReply("accept", None, {"a2a": a2a_meta})
        filled = _text_answer(text, properties)
        if isinstance(filled, str):
            return filled
        content = filled
    elif text:
        a2a_meta["text"] = text
    if not content and not text:
        return "the message holds no answer: reply with text or a data part"
    missing = [name for name in required if name not in content]
    if missing:
        return "the answer lacks the required field(s) " + ", ".join(missing)
    return QuestionReply("accept", content or None, {"a2a": a2a_meta})


def field_options(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(value, title) of every option of a choice field; empty for a free field."""
    found: list[tuple[str, str]] = []
    source = spec
    if spec.get("type") == "array":
        items = spec.get("items")
        source = items if isinstance(items, Mapping) else {}
    for option in source.get("oneOf") or source.get("anyOf") or []:
        if isinstance(option, Mapping) and "const" in option:
            found.append((str(option["const"]), str(option.get("title", option["const"]))))
    for value in source.get("enum") or []:
        found.append((str(value), str(value)))
    return found


def _pick(text: str, spec: Mapping[str, Any]) -> Any:
    """The field's value for a text naming one of its options (by value or title), or None."""
    wanted = text.casefold()
    for value, title in field_options(spec):
        if wanted in (value.casefold(), title.casefold()):
            return [value] if spec.get("type") == "array" else value
    return None


def _text_answer(text: str, properties: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | str:
    if len(properties) == 1:
        ((name, spec),) = properties.items()
        options = field_options(spec)
        if options:
            picked = _pick(text, spec)
            if picked is None:
                shown = ", ".join(title for _value, title in options)
                return f"{text!r} is not one of the options of {name!r}: {shown}"
            return {name: picked}
        value = _typed(text, spec)
        if value is None:
            return f"{text!r} is not a valid {spec.get('type', 'value')} for the field {name!r}"
        return {name: value}
    picks = {name: _pick(text, spec) for name, spec in properties.items() if field_options(spec)}
    chosen = {name: value for name, value in picks.items() if value is not None}
    if len(chosen) == 1:
        return chosen
    free = [
        name
        for name, spec in properties.items()
        if spec.get("type", "string") == "string" and not field_options(spec)
    ]
    if not chosen and len(free) == 1:
        return {free[0]: text}
    names = ", ".join(sorted(properties))
    return f"the question has several fields ({names}): answer with a data part"


def _typed(text: str, spec: Mapping[str, Any]) -> Any:
    kind = spec.get("type", "string")
    if kind == "string":
        return text
    if kind == "boolean":
        lowered = text.lower()
        return True if lowered in _YES else False if lowered in _NO else None
    if kind in ("number", "integer"):
        try:
            number = float(text) if kind == "number" else int(text)
        except ValueError:
            return None
        return number
    return None
