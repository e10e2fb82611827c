"""Storage: every table crcr keeps, on SQLite (WAL, the default) or PostgreSQL.

``crcr.store.base`` holds the declarative ``Base`` and the engine factory; one module
per area defines its tables; Alembic migrations live in ``crcr/store/migrations``.
"""
