"""The body check: what a request body must be before the SDK parses it.

The SDK reads a body with Python's JSON decoder and answers what it raises with the
exception's own text (`'utf-8' codec can't decode byte 0xff`, `maximum recursion depth
exceeded`, `Exceeds the limit (4300 digits)`) and, for HTTP+JSON, a 500. The gate
(gate.py) runs `check_body` on every JSON-typed body of a state-changing request first,
so a body the SDK would choke on is answered by the bridge, in its own words:

- not JSON the bridge can read (JSON-RPC -32700 Parse error, HTTP 400): bytes that are
  not UTF-8, a syntax error, the non-JSON literals NaN / Infinity, nesting deeper than
  MAX_DEPTH arrays and objects;
- JSON the bridge does not take (JSON-RPC -32600 Invalid Request, HTTP 400): a key
  repeated in one object (which of the two would count is the parser's choice), an
  integer longer than MAX_INTEGER_DIGITS digits, a number beyond the float range, a
  string with an unpaired surrogate escape (`"\\ud800"`: not text).

`params_problem` turns the protobuf parser's account of params that do not fit the
schema ("Failed to parse message field: Failed to parse parts field: ...") into a sentence
naming the field (`message.parts`), without the parser's own text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

# The deepest nesting of arrays and objects a body may have. A2A's deepest structure (a
# data part inside a message inside params inside the envelope) is far shallower; a
# caller's own `data` and `metadata` get dozens of levels.
MAX_DEPTH = 64
# The longest integer a body may hold. int64 has 19 digits; Python refuses to turn more
# than 4300 into a number at all.
MAX_INTEGER_DIGITS = 100

PARSE = "parse"  # JSON-RPC -32700
REQUEST = "request"  # JSON-RPC -32600


@dataclass(frozen=True)
class BodyProblem:
    """Why a body is refused: `kind` PARSE or REQUEST, and the caller's message."""

    kind: str
    message: str


class _Refused(ValueError):
    def __init__(self, problem: BodyProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def check_body(body: bytes) -> tuple[Any, BodyProblem | None]:
    """The JSON value of `body`, or the problem that refuses it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, BodyProblem(
            PARSE, f"The request body is not UTF-8 (an invalid byte at offset {exc.start})."
        )
    if text.startswith("\ufeff"):
        return None, BodyProblem(PARSE, "The request body starts with a byte order mark.")
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        return None, BodyProblem(
            PARSE, f"The request body nests deeper than {MAX_DEPTH} arrays and objects."
        )
    try:
        value = json.loads(
            text,
            parse_constant=_no_constant,
            parse_int=_integer,
            parse_float=_float,
            object_pairs_hook=_unique_keys,
        )
    except _Refused as refused:
        return None, refused.problem
    except ValueError as exc:
        where = getattr(exc, "pos", None)
        at = f" at offset {where}" if isinstance(where, int) else ""
        return None, BodyProblem(PARSE, f"The request body is not valid JSON{at}.")
    except RecursionError:  # pragma: no cover - MAX_DEPTH is far below the decoder's limit
        return None, BodyProblem(PARSE, "The request body nests too deeply.")
    if _has_unpaired_surrogate(value):
        return None, BodyProblem(
            REQUEST, "The request body holds a string with an unpaired surrogate escape."
        )
    return value, None


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings
    do not count). Iterative: a body of a million brackets costs one pass, no recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest  # enough is known
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise _Refused(BodyProblem(PARSE, f"The request body is not valid JSON ({name} is not JSON)."))


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        message = f"The request body holds an integer of more than {MAX_INTEGER_DIGITS} digits."
        raise _Refused(BodyProblem(REQUEST, message))
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(BodyProblem(REQUEST, "The request body holds a number out of range."))
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            shown = key if len(key) <= 40 and key.isprintable() else "(a key)"
            raise _Refused(
                BodyProblem(REQUEST, f"The request body repeats the key {shown!r} in one object.")
            )
        found[key] = value
    return found


def _has_unpaired_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")
# The protobuf JSON parser's account of a field it could not take, outermost first.
_FIELD = re.compile(r"Failed to parse (\w+) field")
_NO_FIELD = re.compile(r'has no field named "(\w+)"')


def params_problem(parser_text: str, what: str = "params") -> str:
    """The caller's message for params the schema refused, from the parser's account of
    it: the field named, the parser's own words left out."""
    path = _FIELD.findall(parser_text)
    unknown = _NO_FIELD.findall(parser_text)
    if unknown:
        path.append(unknown[-1])
    if path:
        return f"Invalid {what}: `{'.'.join(path)}` does not have the type or value A2A defines."
    return f"Invalid {what}: they do not match the A2A schema of this method."
