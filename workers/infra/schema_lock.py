"""One process at a time creates a database's schema.

MLflow, Optuna and the ledger each create their tables on first use. Processes that start
together against a fresh PostgreSQL database (``cbs up``: the tracking server, the worker, the
runner and the launching CLI) race in ``CREATE TABLE``, and all but one fail (seen:
``duplicate key value violates unique constraint "pg_type_typname_nsp_index"`` on
``alembic_version``). A PostgreSQL advisory lock, keyed by what is being created, serialises them
across processes and hosts; the later ones then find the tables there. SQLite stores are
serialised with file locks where they are opened; other URLs pass through.
"""

from __future__ import annotations

import contextlib
import hashlib


@contextlib.contextmanager
def schema_lock(url: str, what: str):
    """Hold a PostgreSQL advisory lock named ``what`` on ``url``'s database while the body runs."""
    if not url.startswith(("postgresql", "postgres")):
        yield
        return
    import sqlalchemy as sa

    from workers.infra.settings import with_driver

    url = with_driver(url)
    key = int.from_bytes(hashlib.sha1(f"cbs-schema:{what}".encode()).digest()[:8], "big", signed=True)
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({key})")
            try:
                yield
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({key})")
    finally:
        eng.dispose()
