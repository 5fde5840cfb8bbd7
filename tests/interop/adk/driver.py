"""Google ADK's RemoteA2aAgent in a Runner, against the bridge, as ADK's docs start it.

    python driver.py DEMO_BRIDGE_URL SCRIPTED_BRIDGE_URL

Runs in its own virtual environment (google-adk and the a2a-sdk it pins). Streaming (ADK's
default) and blocking, two conversations of two turns each, one session each: against the
demo agent, the first turn writes a file and the second reads it back; against the scripted
agent, the first turn gets a question and the second answers it. Prints one JSON object:
per conversation, per turn, the final responses' text, the function calls ADK made of a
question, and how many partial events came before.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from google.adk.agents.remote_a2a_agent import AGENT_CARD_WELL_KNOWN_PATH, RemoteA2aAgent
from google.adk.runners import InMemoryRunner
from google.genai import types

APP = "interop"
USER = "user"
FILE_TURNS = ["write notes.txt: alpha from adk", "read notes.txt"]
QUESTION_TURNS = ["ask", "blue"]


async def conversation(base: str, turns: list[str], *, streaming: bool) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=60) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        agent = RemoteA2aAgent(
            name="bridge",
            agent_card=base + AGENT_CARD_WELL_KNOWN_PATH,
            a2a_client_factory=factory,
        )
        runner = InMemoryRunner(agent=agent, app_name=APP)
        session = await runner.session_service.create_session(app_name=APP, user_id=USER)
        seen = []
        for text in turns:
            finals: list[str] = []
            calls: list[str] = []
            partial = 0
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in runner.run_async(
                user_id=USER, session_id=session.id, new_message=message
            ):
                if event.partial:
                    partial += 1
                    continue
                parts = event.content.parts if event.content and event.content.parts else []
                calls += [p.function_call.name or "" for p in parts if p.function_call]
                if event.is_final_response() and parts:
                    finals.append("".join(p.text or "" for p in parts if not p.thought))
            seen.append({"prompt": text, "final": finals, "calls": calls, "partial": partial})
        await runner.close()
        return seen


async def main(demo: str, scripted: str) -> None:
    report = {
        "streaming": await conversation(demo, FILE_TURNS, streaming=True),
        "blocking": await conversation(demo, FILE_TURNS, streaming=False),
        "question_streaming": await conversation(scripted, QUESTION_TURNS, streaming=True),
        "question_blocking": await conversation(scripted, QUESTION_TURNS, streaming=False),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")))
