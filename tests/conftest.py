from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.gemini import FakeGemini
from tests.fakes.openai import FakeOpenAI
from tests.support.postgres import (
    PostgresCluster,
    StateBackend,
    postgres_binaries,
    stop_abandoned,
)
from tests.support.real_adapters import running_fake

# Properties are checked by their examples, not by their speed: on a loaded 2-core machine
# one example can take longer than hypothesis's default 200 ms deadline.
settings.register_profile("bridge", deadline=None)
settings.load_profile("bridge")


@pytest.fixture
def anyio_backend() -> str:
    # The ACP SDK is pure asyncio.
    return "asyncio"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """One throw-away PostgreSQL for the whole session (tests/support/postgres.py)."""
    bin_dir = postgres_binaries()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL is not installed: ./scripts/test installs it "
            "(apt-get install -y postgresql)"
        )
    stop_abandoned()
    cluster = PostgresCluster(bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_database(postgres: PostgresCluster) -> str:
    """A fresh, empty database of the session's PostgreSQL: its name."""
    return postgres.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def state_backend(request: pytest.FixtureRequest) -> StateBackend:
    """Where the state goes: the SQLite file (no A2A_DATABASE_URL), or PostgreSQL."""
    if request.param == "sqlite":
        return StateBackend(None, None)
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    name = cluster.create_database()
    return StateBackend(cluster.url(name), cluster.dsn(name))


# The fake model servers the real adapters talk to (tests/fakes/), one per test module
# that asks for it.
@pytest.fixture(scope="module")
def anthropic() -> Iterator[FakeAnthropic]:
    yield from running_fake(FakeAnthropic())


@pytest.fixture(scope="module")
def openai() -> Iterator[FakeOpenAI]:
    yield from running_fake(FakeOpenAI())


@pytest.fixture(scope="module")
def gemini() -> Iterator[FakeGemini]:
    yield from running_fake(FakeGemini())
