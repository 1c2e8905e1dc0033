"""Alembic environment: migrate the connection the Store hands over.

The Store runs `alembic upgrade head` itself when it opens a database, passing its own
connection in `config.attributes["connection"]`; using that connection (rather than a URL)
is what makes in-memory and temporary SQLite databases migrate in place.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "streameval migrations run through streameval.core.store.Store(url), which passes its "
        "connection; there is no alembic.ini URL to migrate"
    )

# SQLite can only alter tables by copying them: batch mode lets later migrations do so.
context.configure(
    connection=connection,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
