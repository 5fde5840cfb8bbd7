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

A body with more than one fault is refused for one of them: first what the decoder meets
(a syntax error, NaN, a repeated key, nesting beyond its own limit of ~1000 levels), then
nesting beyond MAX_DEPTH, then a number, then a surrogate. The check costs little more
than the decoder itself (bench/body_check.py): the C decoder parses, one level-by-level
walk of the value looks at the rest.

`params_problem` turns the protobuf parser's account of params that do not fit the
schema ("Failed to parse message field: Failed to parse parts field: ...") into a sentence
naming the field (`message.parts`), without the parser's own text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import partial
from itertools import compress
from operator import is_
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
    """The JSON value of `body`, or the problem that refuses it.

    Cheap on the largest body the guard lets in (it runs on the event loop for every JSON
    POST): the C decoder parses, with a hook only for the rare tokens (NaN, Infinity) and
    one per object (repeated keys); then one iterative walk of the value looks at depth,
    integers, floats and strings, skipping what the text shows cannot be there."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, BodyProblem(
            PARSE, f"The request body is not UTF-8 (an invalid byte at offset {exc.start})."
        )
    if text.startswith("\ufeff"):
        return None, BodyProblem(PARSE, "The request body starts with a byte order mark.")
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except _Refused as refused:
        return None, refused.problem
    except RecursionError:
        return None, _TOO_DEEP  # the decoder's own limit (about 1000 levels)
    except json.JSONDecodeError as exc:
        return None, BodyProblem(PARSE, f"The request body is not valid JSON at offset {exc.pos}.")
    except ValueError:
        # Not a syntax error: Python's own limit on turning digits into an int (4300).
        return None, _LONG_INTEGER
    problem = _value_problem(value, strings=_SURROGATE_ESCAPE.search(text) is not None)
    return (value, None) if problem is None else (None, problem)


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings
    do not count)."""
    deepest, _problem = _walk(json.loads(text), strings=False)
    return deepest


_TOO_DEEP = BodyProblem(
    PARSE, f"The request body nests deeper than {MAX_DEPTH} arrays and objects."
)
_LONG_INTEGER = BodyProblem(
    REQUEST, f"The request body holds an integer of more than {MAX_INTEGER_DIGITS} digits."
)
_OUT_OF_RANGE = BodyProblem(REQUEST, "The request body holds a number out of range.")
_LONE_SURROGATE = BodyProblem(
    REQUEST, "The request body holds a string with an unpaired surrogate escape."
)
# |n| < _INTEGER_BOUND: n has at most MAX_INTEGER_DIGITS digits (JSON has no leading zeros).
_INTEGER_BOUND = 10**MAX_INTEGER_DIGITS
# Only an escape writes a surrogate into a string (the UTF-8 decoder refuses encoded
# ones), so a text without one needs no look at its strings. One search: 10 ms on 32 MiB.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# A container with at least this many items is looked at in a few passes of C code (type
# by type) instead of item by item in Python: 16 million integers cost ~0.3 s, not 8.
_WIDE = 32
_IS_INT = partial(is_, int)
_IS_FLOAT = partial(is_, float)
_IS_STR = partial(is_, str)
_IS_CONTAINER = frozenset({dict, list}).__contains__


def _value_problem(value: Any, *, strings: bool) -> BodyProblem | None:
    """Depth first (a body too deep is refused as that whatever else it holds), then the
    numbers, then the strings (when `strings`: the text holds a surrogate escape)."""
    deepest, problem = _walk(value, strings=strings)
    return _TOO_DEEP if deepest > MAX_DEPTH else problem


def _walk(value: Any, *, strings: bool) -> tuple[int, BodyProblem | None]:
    """The depth of `value` (counted up to MAX_DEPTH + 1) and the first problem of its
    scalars. Level by level, without recursion, allocating only the list of the next
    level (a stack of (item, depth) pairs made the collector crawl over 4 million dicts)."""
    problem: BodyProblem | None = None
    level = [value] if type(value) in (dict, list) else []
    depth = 0
    while level and depth <= MAX_DEPTH:
        depth += 1
        below: list[Any] = []
        for container in level:
            found = _container_problem(container, below, strings=strings and problem is None)
            if found is not None and (problem is None or problem is _LONE_SURROGATE):
                problem = found
        level = below
    return depth, problem


def _container_problem(container: Any, below: list[Any], *, strings: bool) -> BodyProblem | None:
    """The problem of `container`'s own scalars (and keys); its containers go to `below`."""
    items = container.values() if type(container) is dict else container
    surrogate = strings and type(container) is dict and any(map(_SURROGATE.search, container))
    if len(items) < _WIDE:
        problem: BodyProblem | None = None
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                below.append(item)
            elif kind is int:
                if not -_INTEGER_BOUND < item < _INTEGER_BOUND:
                    problem = problem or _LONG_INTEGER
            elif kind is float:
                if math.isinf(item):
                    problem = problem or _OUT_OF_RANGE
            elif kind is str and strings and _SURROGATE.search(item):
                surrogate = True
        return problem or (_LONE_SURROGATE if surrogate else None)
    kinds = set(map(type, items))
    if dict in kinds or list in kinds:
        below.extend(compress(items, map(_IS_CONTAINER, map(type, items))))
    if int in kinds:
        ints = items if kinds == {int} else list(compress(items, map(_IS_INT, map(type, items))))
        if max(ints) >= _INTEGER_BOUND or min(ints) <= -_INTEGER_BOUND:
            return _LONG_INTEGER
    if float in kinds:
        floats = list(compress(items, map(_IS_FLOAT, map(type, items))))
        if math.inf in floats or -math.inf in floats:
            return _OUT_OF_RANGE
    if strings and str in kinds:
        surrogate = surrogate or any(
            map(_SURROGATE.search, compress(items, map(_IS_STR, map(type, items))))
        )
    return _LONE_SURROGATE if surrogate else None


def _no_constant(name: str) -> Any:
    raise _Refused(BodyProblem(PARSE, f"The request body is not valid JSON ({name} is not JSON)."))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            shown = key if len(key) <= 40 and key.isprintable() else "(a key)"
            raise _Refused(
                BodyProblem(REQUEST, f"The request body repeats the key {shown!r} in one object.")
            )
        seen.add(key)
    raise AssertionError("unreachable: fewer keys than pairs means one repeats")


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
