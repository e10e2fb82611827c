"""triage: rerun requests and posted reports

Revision ID: 0004
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "triage_rerun_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=200), nullable=False),
        sa.Column("sha", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivery_id", sa.String(length=300), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triage_rerun_requests")),
    )
    with op.batch_alter_table("triage_rerun_requests", schema=None) as batch_op:
        batch_op.create_index("ix_triage_rerun_requests_backend_sha", ["backend", "sha"], unique=False)
        batch_op.create_index("ix_triage_rerun_requests_state_due", ["state", "not_before"], unique=False)
    op.create_table(
        "triage_posts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=200), nullable=False),
        sa.Column("suspect", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("target", sa.String(length=300), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("posted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triage_posts")),
        sa.UniqueConstraint("backend", "suspect", "kind", name="uq_triage_posts_key"),
    )


def downgrade() -> None:
    op.drop_table("triage_posts")
    with op.batch_alter_table("triage_rerun_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_triage_rerun_requests_state_due")
        batch_op.drop_index("ix_triage_rerun_requests_backend_sha")
    op.drop_table("triage_rerun_requests")
