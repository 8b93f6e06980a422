"""Forward-only numbered SQL migrations, applied once each, under an advisory lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg
import structlog

log = structlog.get_logger(__name__)

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 7_346_001  # any constant; serializes concurrent migrators


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("adapters.migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


async def migrate(database_url: str) -> list[Migration]:
    """Apply every migration not yet recorded; returns the ones applied now. Idempotent."""
    applied_now: list[Migration] = []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for migration in available_migrations():
                if migration.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql.encode())
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                log.info("migration_applied", version=migration.version, name=migration.name)
                applied_now.append(migration)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now
