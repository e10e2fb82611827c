"""Alembic environment: the engine comes from ``crcr.store.migrate`` (never from a .ini)."""

from __future__ import annotations

from alembic import context

from crcr.store.migrate import load_all_models

target_metadata = load_all_models()
config = context.config


def run() -> None:
    engine = config.attributes.get("engine")
    if engine is None:  # `alembic` CLI use: build from the settings
        from crcr.settings import get_settings
        from crcr.store.base import make_engine

        engine = make_engine(get_settings().resolved_database_url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run()
