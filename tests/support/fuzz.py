"""Hostile requests for the fuzz of the A2A surface, and the judge of the answers.

A `Probe` is one HTTP request (method, path, headers, raw body) built by hypothesis from a
valid request of some A2A operation (either version, either binding) and a mutation:
bytes that are not UTF-8, nesting beyond the limit, a wrong type at one field, a huge
number, NaN/Infinity literals, a duplicate key, a missing field, a null, an empty body, a
wrong content type, a wrong HTTP method, a path id with odd characters.

`judge` says what is wrong with an answer: a 5xx, Python's own exception text (codec and
recursion errors, `NoneType`, exception class names, tracebacks, JSON decoder positions),
a JSON-RPC error with a code outside the protocol's, a stream that starts and is then cut.
The test (tests/test_fuzz.py) and the larger run (bench/fuzz.py) share both.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

V10 = {"A2A-Version": "1.0"}
JSON = "application/json"

# Text that only Python (or protobuf, or pydantic) writes, never the bridge.
EXCEPTION_TEXT = re.compile(
    r"Traceback|codec can't|recursion depth|NoneType|object is not|object has no attribute"
    r"|not subscriptable|unhashable|invalid literal|positional argument|keyword argument"
    r"|Expecting (value|property name|',' delimiter|':' delimiter)|line \d+ column \d+"
    r"|Extra data|Exceeds the limit|Message type \"|has no field named|Failed to parse"
    r"|validation error for|input_value|errors\.pydantic|Unterminated string|Invalid control"
    r"|Invalid \\\\escape|\b(Value|Type|Key|Attribute|Index|Runtime|Unicode\w*|JSONDecode"
    r"|Recursion|Overflow|Assertion|Lookup|Validation|Parse|Decode)Error\b|\bException\b"
    r"|unknown exception|Unhandled"
)
# Codes a JSON-RPC error of the bridge may carry: JSON-RPC's own and A2A's.
RPC_CODES = frozenset({-32700, -32600, -32601, -32602, -32603, *range(-32099, -31999)})


@dataclass(frozen=True)
class Operation:
    """One A2A operation as a valid request: binding, version, HTTP method and path (with
    `{id}` for the task id), and the body (a JSON-RPC envelope or the HTTP+JSON body)."""

    name: str
    binding: str  # "jsonrpc" or "rest"
    version: str  # "1.0" or "0.3"
    http_method: str
    path: str
    body: dict[str, Any] | None
    streams: bool = False


@dataclass(frozen=True)
class Probe:
    operation: str
    mutation: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    streams: bool = False


@dataclass
class Tally:
    """Counts of answers by status class, and what the judge found wrong."""

    by_status: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    def add(self, status: int, fault: str | None, probe: Probe) -> None:
        key = f"{status // 100}xx"
        self.by_status[key] = self.by_status.get(key, 0) + 1
        if fault is not None:
            self.faults.append(f"{probe.operation}/{probe.mutation}: {fault}")


def _message_10() -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def _message_03() -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": "hi"}],
    }


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


TASK = "{id}"
PUSH = {"url": "https://example.invalid/hook", "token": "t"}


def operations(task_id: str) -> list[Operation]:
    """Every operation of both versions on both bindings, about task `task_id`."""
    t = task_id
    rpc10: list[tuple[str, dict[str, Any], bool]] = [
        ("SendMessage", {"message": _message_10()}, False),
        ("SendStreamingMessage", {"message": _message_10()}, True),
        ("GetTask", {"id": t, "historyLength": 2}, False),
        ("ListTasks", {"pageSize": 5}, False),
        ("CancelTask", {"id": t}, False),
        ("SubscribeToTask", {"id": t}, True),
        (
            "CreateTaskPushNotificationConfig",
            {"taskId": t, "url": PUSH["url"], "token": "t"},
            False,
        ),
        ("GetTaskPushNotificationConfig", {"taskId": t, "id": "c1"}, False),
        ("ListTaskPushNotificationConfigs", {"taskId": t}, False),
        ("DeleteTaskPushNotificationConfig", {"taskId": t, "id": "c1"}, False),
        ("GetExtendedAgentCard", {}, False),
    ]
    rpc03: list[tuple[str, dict[str, Any], bool]] = [
        ("message/send", {"message": _message_03()}, False),
        ("message/stream", {"message": _message_03()}, True),
        ("tasks/get", {"id": t, "historyLength": 2}, False),
        ("tasks/cancel", {"id": t}, False),
        ("tasks/resubscribe", {"id": t}, True),
        (
            "tasks/pushNotificationConfig/set",
            {"taskId": t, "pushNotificationConfig": PUSH},
            False,
        ),
        ("tasks/pushNotificationConfig/get", {"id": t, "pushNotificationConfigId": "c1"}, False),
        ("tasks/pushNotificationConfig/list", {"id": t}, False),
        (
            "tasks/pushNotificationConfig/delete",
            {"id": t, "pushNotificationConfigId": "c1"},
            False,
        ),
        ("agent/getAuthenticatedExtendedCard", {}, False),
    ]
    found = [Operation(m, "jsonrpc", "1.0", "POST", "/", _rpc(m, p), s) for m, p, s in rpc10]
    found += [Operation(m, "jsonrpc", "0.3", "POST", "/", _rpc(m, p), s) for m, p, s in rpc03]
    rest10 = [
        ("SendMessage", "POST", "/rest/message:send", {"message": _message_10()}, False),
        ("SendStreamingMessage", "POST", "/rest/message:stream", {"message": _message_10()}, True),
        ("GetTask", "GET", f"/rest/tasks/{TASK}", None, False),
        ("ListTasks", "GET", "/rest/tasks", None, False),
        ("CancelTask", "POST", f"/rest/tasks/{TASK}:cancel", {}, False),
        ("SubscribeToTask", "POST", f"/rest/tasks/{TASK}:subscribe", {}, True),
        (
            "CreatePushConfig",
            "POST",
            f"/rest/tasks/{TASK}/pushNotificationConfigs",
            {"url": PUSH["url"], "token": "t"},
            False,
        ),
        ("GetPushConfig", "GET", f"/rest/tasks/{TASK}/pushNotificationConfigs/c1", None, False),
        ("ListPushConfigs", "GET", f"/rest/tasks/{TASK}/pushNotificationConfigs", None, False),
        (
            "DeletePushConfig",
            "DELETE",
            f"/rest/tasks/{TASK}/pushNotificationConfigs/c1",
            None,
            False,
        ),
        ("GetExtendedAgentCard", "GET", "/rest/extendedAgentCard", None, False),
    ]
    rest03 = [
        ("message:send", "POST", "/rest/v1/message:send", {"message": _message_03()}, False),
        ("message:stream", "POST", "/rest/v1/message:stream", {"message": _message_03()}, True),
        ("tasks:get", "GET", f"/rest/v1/tasks/{TASK}", None, False),
        ("tasks:cancel", "POST", f"/rest/v1/tasks/{TASK}:cancel", {}, False),
        ("tasks:subscribe", "POST", f"/rest/v1/tasks/{TASK}:subscribe", {}, True),
        (
            "push:set",
            "POST",
            f"/rest/v1/tasks/{TASK}/pushNotificationConfigs",
            {"taskId": t, "pushNotificationConfig": PUSH},
            False,
        ),
        ("push:get", "GET", f"/rest/v1/tasks/{TASK}/pushNotificationConfigs/c1", None, False),
        ("push:list", "GET", f"/rest/v1/tasks/{TASK}/pushNotificationConfigs", None, False),
        ("card", "GET", "/rest/v1/card", None, False),
    ]
    found += [Operation(n, "rest", "1.0", m, p, b, s) for n, m, p, b, s in rest10]
    found += [Operation(n, "rest", "0.3", m, p, b, s) for n, m, p, b, s in rest03]
    return found


# --- mutations ---------------------------------------------------------------------------

# How deep the nesting of a "deep" body goes: far beyond the bridge's limit (64), and
# beyond what Python's recursive decoders take.
DEEP = 100_000


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((*prefix, key))
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.append((*prefix, index))
            found += _paths(item, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any, *, delete: bool = False) -> Any:
    copy = json.loads(json.dumps(value))
    holder = copy
    for step in path[:-1]:
        holder = holder[step]
    if delete:
        del holder[path[-1]]
    else:
        holder[path[-1]] = new
    return copy


WRONG_VALUES: list[Any] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "x",
    [],
    {},
    [None],
    {"a": None},
    10**30,
    "\u0000",
    "\ud800",
    "ROLE_" + "X" * 50,
]
# Raw JSON texts put where a value goes (what json.dumps cannot write).
RAW_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999999",
    "-1e999999",
    "1" + "0" * 5000,
    "1e-99999",
    "12345678901234567890123456789",
]
ODD_IDS = [
    "..",
    "%2e%2e",
    "%00",
    "%ff%fe",
    "a%2Fb",
    "%25",
    "x" * 5000,
    "%F0%9F%92%A9",
    "%E2%80%AE",
    "'%20OR%201=1",
    "tasks",
    "%0d%0aX-Injected:%201",
]
CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin-1",
    "application/xml",
    "",
]
HTTP_METHODS = ["GET", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "POST"]
RAW_MARK = "\u0001RAW\u0001"


def _dumps_with_raw(value: Any, raw: str) -> bytes:
    text = json.dumps(value)
    return text.replace(json.dumps(RAW_MARK), raw).encode()


@st.composite
def probes(draw: Callable[[Any], Any], task_id: str) -> Probe:
    """One hostile request built from a valid one."""
    operation: Operation = draw(st.sampled_from(operations(task_id)))
    headers = {"Content-Type": JSON}
    if operation.version == "1.0":
        headers.update(V10)
    path = operation.path.replace(TASK, task_id)
    method = operation.http_method
    body: bytes = b"" if operation.body is None else json.dumps(operation.body).encode()
    value = operation.body
    paths = _paths(value) if value is not None else []
    choices = [
        "not_utf8",
        "deep",
        "empty",
        "content_type",
        "http_method",
        "garbage",
        "truncated",
        "not_object",
    ]
    if paths:
        choices += ["wrong_type"] * 6 + ["raw_value"] * 3 + ["missing"] * 2 + ["duplicate"]
    if TASK in operation.path:
        choices += ["odd_id"] * 2
    mutation = draw(st.sampled_from(choices))
    if mutation == "not_utf8":
        cut = draw(st.integers(0, max(len(body) - 1, 0)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xfe\xff", b"\x80"]))
        body = body[:cut] + junk + body[cut:]
        if not body.strip(b"\xff\xfe\x80"):
            body = b'{"a": "' + junk + b'"}'
    elif mutation == "deep":
        depth = draw(st.sampled_from([65, 200, 1000, DEEP]))
        kind = draw(st.sampled_from(["list", "object", "params"]))
        if kind == "list":
            nested = b"[" * depth + b"]" * depth
        elif kind == "object":
            nested = b'{"a":' * depth + b"1" + b"}" * depth
        else:
            nested = b'{"x":' * depth + b"1" + b"}" * depth
        if value is not None and operation.binding == "jsonrpc":
            body = body.replace(b'"params": ', b'"params": ' + nested + b', "p": ', 1)
        elif value is not None:
            body = b'{"message": ' + nested + b"}"
        else:
            body = nested
    elif mutation == "empty":
        body = b""
    elif mutation == "content_type":
        kind = draw(st.sampled_from(CONTENT_TYPES))
        if kind:
            headers["Content-Type"] = kind
        else:
            del headers["Content-Type"]
    elif mutation == "http_method":
        method = draw(st.sampled_from([m for m in HTTP_METHODS if m != method]))
    elif mutation == "garbage":
        body = draw(st.binary(min_size=1, max_size=64))
    elif mutation == "truncated" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif mutation == "not_object":
        body = draw(st.sampled_from([b"[]", b"null", b"1", b'"x"', b"[{}]", b"true", b"{}"]))
    elif mutation == "wrong_type":
        where = draw(st.sampled_from(paths))
        body = json.dumps(_replace(value, where, draw(st.sampled_from(WRONG_VALUES)))).encode()
    elif mutation == "raw_value":
        where = draw(st.sampled_from(paths))
        raw = draw(st.sampled_from(RAW_VALUES))
        body = _dumps_with_raw(_replace(value, where, RAW_MARK), raw)
    elif mutation == "missing":
        where = draw(st.sampled_from(paths))
        body = json.dumps(_replace(value, where, None, delete=True)).encode()
    elif mutation == "duplicate":
        text = json.dumps(value)
        body = ('{"id": 7, ' + text[1:]).encode() if text.startswith("{") else text.encode()
        body = body.replace(b'"jsonrpc": "2.0"', b'"jsonrpc": "2.0", "jsonrpc": 2', 1)
    elif mutation == "odd_id":
        odd = draw(st.sampled_from(ODD_IDS))
        path = operation.path.replace(TASK, odd)
    return Probe(operation.name, mutation, method, path, headers, body, operation.streams)


# --- the judge ----------------------------------------------------------------------------


def judge(probe: Probe, status: int, body: bytes, *, stream_cut: bool = False) -> str | None:
    """What is wrong with the answer to `probe`, or None."""
    text = body.decode("utf-8", "replace")
    if status >= 500:
        return f"HTTP {status}: {text[:200]}"
    found = EXCEPTION_TEXT.search(text)
    if found is not None:
        return f"exception text {found.group()!r} in {text[:300]}"
    if stream_cut:
        return "the stream was cut without an error"
    for payload in _json_payloads(text):
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and "code" in error and probe.path == "/":
            code = error["code"]
            if code not in RPC_CODES:
                return f"JSON-RPC error code {code!r}"
            if code == -32603:
                return f"internal error for a client's mistake: {error.get('message')!r}"
    return None


def _json_payloads(text: str) -> list[Any]:
    """The JSON of a plain answer, or of each `data:` line of an event stream."""
    lines = [line[5:] for line in text.splitlines() if line.startswith("data:")]
    found = []
    for chunk in lines or [text]:
        try:
            found.append(json.loads(chunk))
        except ValueError:
            continue
    return found


# --- sending -----------------------------------------------------------------------------

# Every probe is answered (or its stream ended) within this, else the server hung.
ANSWER_WITHIN_S = 20.0
# Bytes of an answer read at most (a stream that would run on is cut by the test).
READ_LIMIT = 256 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    stream_cut: bool


async def deliver(client: Any, base_url: str, probe: Probe) -> Answer:
    """Send `probe` and read its whole answer, within ANSWER_WITHIN_S (else it raises)."""
    import anyio
    import httpx

    with anyio.fail_after(ANSWER_WITHIN_S):
        request = client.build_request(
            probe.method,
            base_url + probe.path,
            headers=probe.headers,
            content=probe.body if probe.method not in ("GET", "HEAD") or probe.body else None,
        )
        response = await client.send(request, stream=True)
        received = b""
        cut = False
        try:
            async for chunk in response.aiter_raw():
                received += chunk
                if len(received) > READ_LIMIT:
                    break
        except (httpx.RemoteProtocolError, httpx.ReadError):
            cut = True
        finally:
            await response.aclose()
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        if streamed and response.status_code == 200 and b"data:" not in received:
            cut = True
        return Answer(response.status_code, received, cut)
