"""Google ADK's RemoteA2aAgent in a Runner, against the bridge, as ADK's docs start it.

    python driver.py BRIDGE_URL

Runs in its own virtual environment (google-adk and the a2a-sdk it pins). One conversation
streaming (ADK's default) and one not, each of two turns in one session: the first writes a
file, the second reads it back. Prints one JSON object: per mode, per turn, the final
response's text, how many partial events came before it, and the task state ADK recorded.
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
TURNS = ["write notes.txt: alpha from adk", "read notes.txt"]


async def conversation(base: str, *, streaming: bool) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=60) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        agent = RemoteA2aAgent(
            name="bridge",
            agent_card=base + AGENT_CARD_WELL_KNOWN_PATH,
            a2a_client_factory=factory,
        )
        runner = InMemoryRunner(agent=agent, app_name=APP)
        session = await runner.session_service.create_session(app_name=APP, user_id=USER)
        turns = []
        for text in TURNS:
            finals: list[str] = []
            partial = 0
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for event in runner.run_async(
                user_id=USER, session_id=session.id, new_message=message
            ):
                if event.partial:
                    partial += 1
                    continue
                if event.is_final_response() and event.content and event.content.parts:
                    finals.append(
                        "".join(p.text or "" for p in event.content.parts if not p.thought)
                    )
            turns.append({"prompt": text, "final": finals, "partial": partial})
        await runner.close()
        return turns


async def main(base: str) -> None:
    report = {
        "streaming": await conversation(base, streaming=True),
        "blocking": await conversation(base, streaming=False),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1].rstrip("/")))
