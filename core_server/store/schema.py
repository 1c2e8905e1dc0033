"""A store's schema as it opens: migrated to the newest with Alembic when opened
read-write, only checked when opened read-only (which never writes).

Only migrating imports Alembic (a tenth of a second): a read-only store's schema version is
checked against the migration files' names (light.check_schema_version).
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy import text as sql_text

from streameval.core.store.light import MIGRATIONS_DIR, check_schema_version

# Any constant works: it only has to be the same for every process migrating one database.
_MIGRATION_LOCK_KEY = 0x5E7A_0001


def migrate(engine: Engine) -> None:
    """Upgrade the database to the newest schema (creating it in an empty database)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Several Core workers may open one fresh database at once: one migrates.
            conn.execute(
                sql_text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
            )
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def check_schema(engine: Engine, display_url: str) -> None:
    """A read-only store must already have this streameval's schema: it cannot migrate."""
    with engine.connect() as conn:
        version = None
        if "alembic_version" in _table_names(conn):
            version = conn.execute(sql_text("SELECT version_num FROM alembic_version")).scalar()
    check_schema_version(display_url, version)


def _table_names(conn: Connection) -> list[str]:
    """The table names of the connected database."""
    return list(inspect(conn).get_table_names())
