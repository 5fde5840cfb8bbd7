"""Strands Agents' A2AAgent against the bridge, as its docs start it.

    python driver.py BRIDGE_URL

Runs in its own virtual environment (strands-agents[a2a], on a2a-sdk 0.3): `A2AAgent`
reads the card at /.well-known/agent-card.json, so a Strands agent discovers the bridge
with no setting. A streamed and a blocking invocation; and a question, which Strands
reports as an interrupt with the question's text. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from a2a.client import ClientConfig
from strands.agent.a2a_agent import A2AAgent


def text_of(result: Any) -> str:
    return "".join(block.get("text", "") for block in result.message["content"])


async def invoke(base: str, prompt: str, *, streaming: bool) -> dict[str, Any]:
    agent = A2AAgent(endpoint=base, client_config=ClientConfig(streaming=streaming))
    result = await agent.invoke_async(prompt)
    return {"text": text_of(result), "stop_reason": result.stop_reason}


async def main(base: str) -> None:
    report = {
        "streaming": await invoke(base, "hello", streaming=True),
        "blocking": await invoke(base, "hello", streaming=False),
        "question": await invoke(base, "ask", streaming=True),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/")))
