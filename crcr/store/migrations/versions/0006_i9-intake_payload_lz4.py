"""PostgreSQL: webhook payloads TOAST-compressed with lz4 instead of pglz

A delivery's payload (20-30 KB of JSON for a pull_request) is compressed by the
server when it is stored. With PostgreSQL's default (pglz) an INSERT of one such
payload cost the server ~2 ms of CPU, with lz4 ~0.4 ms (measured on PostgreSQL 15,
BENCHMARKS.md issue 9): intake on PostgreSQL was paying mostly for that compression.
Rows already stored keep their compression; servers before 14, or built without
lz4, are left as they are. SQLite: nothing to do.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or (bind.dialect.server_version_info or (0,)) < (14,):
        return False
    values = bind.execute(sa.text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"))
    return "lz4" in (values.scalar() or [])


def upgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE deliveries ALTER COLUMN payload SET COMPRESSION lz4")


def downgrade() -> None:
    if _lz4_available():
        op.execute("ALTER TABLE deliveries ALTER COLUMN payload SET COMPRESSION DEFAULT")
