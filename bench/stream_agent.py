#!/usr/bin/env python3
"""A standard-library ACP agent that streams a known text, for benchmarks.

It starts in tens of milliseconds (the ACP SDK alone takes ~0.6 s to import), so what a
benchmark measures is the client or the bridge, not the agent. Prompts:

    stream N S [D]   N agent_message_chunk notifications of S characters, D microseconds
                     apart (0: as fast as the pipe takes them, written in 64 KiB batches)
    sleep MS         wait, then one chunk
    anything else    one chunk echoing the prompt

Chunk i is `chunk_text(i, S)`: an 8-digit counter, a colon and letters, cut to S. A client
rebuilds the whole answer with `expected_text(N, S)` and so notices a dropped, doubled or
reordered chunk. Sessions offer the modes default and acceptEdits (current: default).
"""

from __future__ import annotations

import json
import sys
import time

LETTERS = "abcdefghijklmnopqrstuvwxyz" * 8
BATCH_BYTES = 64 * 1024


def chunk_text(i: int, size: int) -> str:
    head = f"{i:08d}:"
    text = head + LETTERS * (size // len(LETTERS) + 1)
    return text[:size] if size >= len(head) else head[-size:] if size > 0 else ""


def expected_text(n: int, size: int) -> str:
    return "".join(chunk_text(i, size) for i in range(n))


def write(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def update_line(session_id: str, text: str) -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": text},
                },
            },
        },
        separators=(",", ":"),
    )


def stream(session_id: str, n: int, size: int, delay_us: int) -> None:
    if delay_us:
        start = time.perf_counter()
        for i in range(n):
            target = start + i * delay_us / 1e6
            pause = target - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            sys.stdout.write(update_line(session_id, chunk_text(i, size)) + "\n")
            sys.stdout.flush()
        return
    batch: list[str] = []
    pending = 0
    for i in range(n):
        line = update_line(session_id, chunk_text(i, size)) + "\n"
        batch.append(line)
        pending += len(line)
        if pending >= BATCH_BYTES:
            sys.stdout.write("".join(batch))
            sys.stdout.flush()
            batch, pending = [], 0
    sys.stdout.write("".join(batch))
    sys.stdout.flush()


def session_result(session_id: str, mode: str) -> dict[str, object]:
    modes = [{"id": "default", "name": "Default"}, {"id": "acceptEdits", "name": "Accept edits"}]
    return {
        "sessionId": session_id,
        "modes": {"currentModeId": mode, "availableModes": modes},
        "configOptions": [
            {
                "id": "mode",
                "name": "Mode",
                "category": "mode",
                "type": "select",
                "currentValue": mode,
                "options": [{"value": m["id"], "name": m["name"]} for m in modes],
            }
        ],
    }


def main() -> None:
    sessions = 0
    mode = "default"
    for raw in sys.stdin:
        if not raw.strip():
            continue
        message = json.loads(raw)
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            continue  # notifications (session/cancel): a stream is not interruptible
        result: object
        if method == "initialize":
            result = {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False},
                "agentInfo": {"name": "bench-stream-agent", "version": "1"},
                "authMethods": [],
            }
        elif method == "session/new":
            sessions += 1
            result = session_result(f"bench-{sessions}", mode)
        elif method == "session/set_mode":
            mode = params.get("modeId", mode)
            result = {}
        elif method == "session/set_config_option":
            mode = params.get("value", mode)
            result = session_result(params.get("sessionId", ""), mode)
            result = {"configOptions": result["configOptions"]}
        elif method == "session/prompt":
            session_id = params.get("sessionId", "")
            text = " ".join(
                b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text"
            )
            words = text.split()
            if words[:1] == ["stream"] and len(words) in (3, 4):
                stream(
                    session_id,
                    int(words[1]),
                    int(words[2]),
                    int(words[3]) if len(words) == 4 else 0,
                )
            elif words[:1] == ["sleep"] and len(words) == 2:
                time.sleep(int(words[1]) / 1000)
                sys.stdout.write(update_line(session_id, f"slept {words[1]}") + "\n")
            else:
                sys.stdout.write(update_line(session_id, text) + "\n")
            result = {"stopReason": "end_turn"}
        elif method == "session/close":
            result = {}
        else:
            write(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32601, "message": f"Method not found: {method}"},
                }
            )
            continue
        write({"jsonrpc": "2.0", "id": request_id, "result": result})


if __name__ == "__main__":
    main()
