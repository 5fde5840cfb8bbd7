from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The ACP SDK is pure asyncio.
    return "asyncio"
