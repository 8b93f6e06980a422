"""One SQL statement as its own transaction, whatever the pool's autocommit setting."""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from typing import Any

from psycopg import AsyncConnection


def one_statement(conn: AsyncConnection[Any]) -> AbstractAsyncContextManager[Any]:
    """In autocommit (the worker's pool) a single statement commits by itself: one round trip.
    A connection without autocommit gets an explicit transaction, so the statement is
    committed rather than rolled back when the pool takes the connection back."""
    return contextlib.nullcontext() if conn.autocommit else conn.transaction()
