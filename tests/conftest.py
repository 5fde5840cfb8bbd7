from __future__ import annotations

import pytest
from hypothesis import settings

# Properties are checked by their examples, not by their speed: on a loaded 2-core machine
# one example can take longer than hypothesis's default 200 ms deadline.
settings.register_profile("bridge", deadline=None)
settings.load_profile("bridge")


@pytest.fixture
def anyio_backend() -> str:
    # The ACP SDK is pure asyncio.
    return "asyncio"
