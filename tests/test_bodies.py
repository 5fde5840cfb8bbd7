"""The body check (a2a/bodies.py): what the SDK's decoder would choke on is refused in the
bridge's words, with the JSON-RPC kind of error it deserves; what A2A sends passes."""

from __future__ import annotations

import json

import pytest

from a2a_acp_bridge.a2a.bodies import (
    MAX_DEPTH,
    PARSE,
    REQUEST,
    check_body,
    nesting_depth,
    params_problem,
)


def test_an_ordinary_request_passes_whole() -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"a": [1, 2.5, None]}}
    value, problem = check_body(json.dumps(body).encode())
    assert problem is None
    assert value == body


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"a": "\xff"}', PARSE),
        (b'{"a": "\xed\xa0\x80"}', PARSE),
        (b"\xef\xbb\xbf{}", PARSE),
        (b"", PARSE),
        (b'{"a": ', PARSE),
        (b'{"a": NaN}', PARSE),
        (b'{"a": -Infinity}', PARSE),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), PARSE),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, PARSE),
        (b'{"a": 1, "a": 2}', REQUEST),
        (b'{"a": ' + b"1" * 5000 + b"}", REQUEST),
        (b'{"a": 1e999999}', REQUEST),
        (b'{"a": "\\ud800"}', REQUEST),
        (b'{"\\udfff": 1}', REQUEST),
    ],
)
def test_what_the_decoder_would_choke_on_is_refused_in_the_bridge_s_words(
    body: bytes, kind: str
) -> None:
    value, problem = check_body(body)
    assert value is None
    assert problem is not None
    assert problem.kind == kind
    assert problem.message.startswith("The request body")
    for python_text in ("codec", "recursion", "Expecting", "line 1", "Exceeds", "Error"):
        assert python_text not in problem.message


def test_the_depth_limit_is_exact_and_brackets_in_strings_do_not_count() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert check_body(at_limit.encode())[1] is None
    assert nesting_depth('{"a": "[[[[[[\\"[[["}') == 1
    assert check_body(json.dumps({"t": "[" * 1000}).encode())[1] is None


def test_params_the_schema_refused_name_the_field_not_the_parser_s_words() -> None:
    parser = (
        "Failed to parse message field: Failed to parse parts field: Failed to parse text "
        "field: expected string or bytes-like object, got 'dict'.."
    )
    message = params_problem(parser)
    assert "`message.parts.text`" in message
    assert "expected string" not in message
    assert "Failed" not in message
    assert "Failed" not in params_problem("'NoneType' object is not iterable")
    assert "NoneType" not in params_problem("'NoneType' object is not iterable")


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ("1" * 101, REQUEST, "integer of more than"),
        ("-" + "9" * 101, REQUEST, "integer of more than"),
        ("1e999", REQUEST, "out of range"),
        ('"\\udc00"', REQUEST, "unpaired surrogate"),
        ('{"\\ud800": 1}', REQUEST, "unpaired surrogate"),
        ("[" * MAX_DEPTH + "]" * MAX_DEPTH, PARSE, "nests deeper"),
    ],
)
def test_a_fault_among_many_items_is_found_as_among_few(fault: str, kind: str, words: str) -> None:
    # Wide arrays and objects are looked at type by type, narrow ones item by item.
    for width in (1, 1000):
        items = ['"s"', "2.5", "7", "{}", "[]", "null"] * width
        for body in (
            f"[{fault}, {', '.join(items)}]",
            f'{{"k": {fault}, "i": [{", ".join(items)}]}}',
        ):
            _value, problem = check_body(body.encode())
            assert problem is not None, (width, body[:60])
            assert (problem.kind, words in problem.message) == (kind, True)
    paired = json.dumps(["\U0001f600"] * 1000, ensure_ascii=True).encode()
    assert check_body(paired)[1] is None
