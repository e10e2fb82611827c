"""CRCR parity and review fixes: raw test_results, check-run push claims, 64-bit check-run ids

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("test_results", sa.JSON(), nullable=True))
    with op.batch_alter_table("check_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("push_claimed_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.alter_column("github_id", existing_type=sa.Integer(), type_=sa.BigInteger(),
                              existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("check_runs", schema=None) as batch_op:
        batch_op.alter_column("github_id", existing_type=sa.BigInteger(), type_=sa.Integer(),
                              existing_nullable=True)
        batch_op.drop_column("push_claimed_until")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("test_results")
