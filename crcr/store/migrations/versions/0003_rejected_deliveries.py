"""rejected deliveries (400/401/413 answers, bounded)

Revision ID: 0003
Revises: 0004 (chained after main's head when main was merged in)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejected_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=200), nullable=True),
        sa.Column("event", sa.String(length=64), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rejected_deliveries")),
    )
    with op.batch_alter_table("rejected_deliveries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rejected_deliveries_received_at"), ["received_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rejected_deliveries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rejected_deliveries_received_at"))
    op.drop_table("rejected_deliveries")
