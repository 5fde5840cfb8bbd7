"""An A2A client for the benchmark, standard library only: SendStreamingMessage, SSE read as
it arrives, the answer rebuilt from the `answer` artifact's chunks and checked."""

from __future__ import annotations

import http.client
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}
TIMEOUT_S = 300.0


@dataclass
class Stream:
    context_id: str
    total_ms: float
    first_event_ms: float
    first_text_ms: float
    frames: int
    text: str
    state: str


def send_streaming(port: int, text: str, context_id: str | None = None) -> Stream:
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if context_id:
        message["contextId"] = context_id
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": {"message": message},
        }
    )
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    started = time.perf_counter()
    connection.request(
        "POST",
        "/",
        body=body,
        headers={
            "Content-Type": "application/json",
            "A2A-Version": "1.0",
            "Accept": "text/event-stream",
        },
    )
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    first_event = first_text = None
    frames = 0
    pieces: list[str] = []
    state = ""
    context = context_id or ""
    while True:
        line = response.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        now = time.perf_counter()
        frames += 1
        first_event = first_event or now
        payload = json.loads(line[5:])
        if "error" in payload:
            raise RuntimeError(f"stream error: {payload['error']}")
        result = payload["result"]
        if "task" in result:
            context = result["task"]["contextId"]
            state = result["task"]["status"]["state"]
        elif "artifactUpdate" in result:
            update = result["artifactUpdate"]
            if update["artifact"]["artifactId"] == "answer":
                texts = [p["text"] for p in update["artifact"]["parts"] if "text" in p]
                if texts and first_text is None:
                    first_text = now
                if not update.get("append"):
                    pieces.clear()
                pieces.extend(texts)
        elif "statusUpdate" in result:
            state = result["statusUpdate"]["status"]["state"]
            if state in TERMINAL:
                break
    ended = time.perf_counter()
    connection.close()
    return Stream(
        context_id=context,
        total_ms=(ended - started) * 1000,
        first_event_ms=((first_event or ended) - started) * 1000,
        first_text_ms=((first_text or ended) - started) * 1000,
        frames=frames,
        text="".join(pieces),
        state=state,
    )
