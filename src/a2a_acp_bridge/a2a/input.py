"""The caller's A2A message as prompt parts, within documented size budgets.

Text parts become text; a file sent inline (`raw`) or by reference (`url`) and structured
data (`data`) become the matching prompt part, which the ACP side turns into content the
agent accepts. Nothing is dropped silently: a part the bridge cannot carry, or one over the
budget, is an InvalidParams error that names it.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict

from a2a_acp_bridge.errors import BridgeError
from a2a_acp_bridge.prompt import BlobPart, DataPart, LinkPart, PromptPart, TextPart

# Budgets for one message: an inline file, all inline files together, all text together.
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FILES_BYTES = 16 * 1024 * 1024
MAX_TEXT_CHARS = 1024 * 1024


class InputProblem(BridgeError):
    """The message cannot be given to the agent as it is."""


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
