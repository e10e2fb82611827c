"""PR comment commands and the comments crcr edits in place

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "commands",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.String(length=200), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("commenter", sa.String(length=100), nullable=False),
        sa.Column("command", sa.String(length=20), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("permission", sa.String(length=20), nullable=True),
        sa.Column("head_sha", sa.String(length=64), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_commands")),
        sa.UniqueConstraint("comment_id", "position", name="uq_commands_comment_id"),
    )
    op.create_index("ix_commands_repo_pr", "commands", ["repo", "pr_number"], unique=False)
    op.create_table(
        "pr_comments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("github_id", sa.BigInteger(), nullable=True),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pr_comments")),
        sa.UniqueConstraint("repo", "pr_number", "kind", name="uq_pr_comments_repo"),
    )


def downgrade() -> None:
    op.drop_table("pr_comments")
    op.drop_index("ix_commands_repo_pr", table_name="commands")
    op.drop_table("commands")
