"""Adapter endpoints registered with the control API (POST /adapters) under a name runs can
use, kept in the store across Core restarts (the `adapter_endpoints` table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, insert, select

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, retried, utc_now


@dataclass(frozen=True)
class AdapterEndpoint:
    """An adapter endpoint registered with the control API under a name runs can use."""

    name: str
    url: str
    concurrency: int
    registered_at: datetime


class StoreEndpoints(StoreDatabase):
    """The Store's registered adapter endpoints."""

    def register_adapter_endpoint(self, name: str, url: str, concurrency: int) -> AdapterEndpoint:
        """Store an endpoint under `name`, replacing one already registered under it."""
        endpoint = AdapterEndpoint(name, url, concurrency, registered_at=utc_now())
        table = models.adapter_endpoints
        # Delete then insert in one transaction: an upsert is spelled differently on SQLite
        # and PostgreSQL, and this spelling is the same on both.
        with self.transaction(f"cannot register adapter endpoint {name!r}") as conn:
            conn.execute(delete(table).where(table.c.name == name))
            conn.execute(insert(table).values(**asdict(endpoint)))
        return endpoint

    @retried
    def adapter_endpoints(self) -> list[AdapterEndpoint]:
        table = models.adapter_endpoints
        with self.transaction("cannot list adapter endpoints") as conn:
            rows = conn.execute(select(table).order_by(table.c.name))
            return [_adapter_endpoint(row) for row in rows]


def _adapter_endpoint(row: Row[Any]) -> AdapterEndpoint:
    return AdapterEndpoint(**row._asdict())
