"""Run the bridge for a test: uvicorn on 127.0.0.1, port 0, in the test's event loop."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from a2a_acp_bridge.a2a.app import build_app
from a2a_acp_bridge.bridge import Bridge
from a2a_acp_bridge.config import Settings
from a2a_acp_bridge.server import BridgeServer, uvicorn_config
from tests.support.agents import AGENT_IO, AGENTS_DIR

# How long a test waits for the server to come up or go down.
SERVER_START_S = 20.0
SERVER_STOP_S = 30.0


@dataclass
class RunningBridge:
    url: str
    settings: Settings
    bridge: Bridge
    app: Any

    @property
    def rpc_url(self) -> str:
        return self.url + "/"


def make_settings(tmp_path: Path, env: Mapping[str, str] | None = None) -> Settings:
    """Settings as the CLI would build them, with sandboxes under the test's tmp_path."""
    values = {"PORT": "0", "ACP_SANDBOX_DIR": str(tmp_path / "sandboxes"), "ACP_POOL_SIZE": "0"}
    io = tmp_path / AGENT_IO
    if io.is_dir():
        # The scripted agents' logs (tests/support/agents.py), shared by every adapter,
        # and the agent itself, which a shim names only inside its own script.
        values["ACP_ISOLATION_WRITE"] = str(io)
        values["ACP_ISOLATION_READ"] = str(AGENTS_DIR)
    values.update(env or {})
    return Settings.from_env(values, cwd=tmp_path)


@contextlib.asynccontextmanager
async def serve_bridge(
    settings: Settings, environ: Mapping[str, str] | None = None, **bridge_options: Any
) -> AsyncIterator[RunningBridge]:
    """The app under a real uvicorn on 127.0.0.1 with an ephemeral port (`bridge_options`
    go to `Bridge`, e.g. a replacement classifier)."""
    bridge = Bridge(
        settings, environ=dict(environ if environ is not None else os.environ), **bridge_options
    )
    app = build_app(settings, bridge=bridge)
    server = BridgeServer(uvicorn_config(app, settings, host="127.0.0.1", port=0), app)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(SERVER_START_S):
            while not server.started:
                if server.should_exit:
                    raise RuntimeError("the bridge did not start")
                await anyio.sleep(0.01)
        port = server.bound_port()
        assert port is not None
        try:
            yield RunningBridge(f"http://127.0.0.1:{port}", settings, bridge, app)
        finally:
            server.should_exit = True
            with anyio.fail_after(SERVER_STOP_S):
                while server.started and not group.cancel_scope.cancel_called:
                    await anyio.sleep(0.01)
                    if not _serving(server):
                        break


def _serving(server: BridgeServer) -> bool:
    return any(s.is_serving() for s in getattr(server, "servers", []))


PYTHON = sys.executable
