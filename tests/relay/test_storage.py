"""Migrations match the models (no drift) on SQLite and PostgreSQL; logs never leak secrets."""

from __future__ import annotations

import io
import json
import logging

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient

from crcr.logs import configure_logging, log_context, redact
from crcr.store.base import make_engine
from crcr.store.migrate import current_revision, load_all_models, upgrade
from relay.app import create_app
from tests.relay.harness import SECRET, make_settings, post_webhook, pr_payload


def test_migrations_create_every_table_with_no_drift(database_url):
    engine = make_engine(database_url)
    try:
        upgrade(engine)
        upgrade(engine)  # idempotent
        assert current_revision(engine)
        metadata = load_all_models()
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
        assert diff == [], f"models and migrations differ; regenerate the migration: {diff}"
        assert {"deliveries", "dispatches"} <= set(metadata.tables)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgres_compresses_delivery_payloads_with_lz4(postgres_url):
    """pglz cost the server ~2 ms of CPU per 23 KB payload stored; lz4 ~0.4 ms (migration 0006)."""
    import sqlalchemy as sa

    engine = make_engine(postgres_url)
    try:
        upgrade(engine)
        with engine.begin() as conn:
            assert "lz4" in conn.execute(sa.text(
                "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")).scalar()
            method = conn.execute(sa.text("SELECT attcompression FROM pg_attribute WHERE attname = 'payload' "
                                          "AND attrelid = 'deliveries'::regclass")).scalar()
            assert method == "l"  # lz4 (pglz is 'p', the default '')
    finally:
        engine.dispose()


def test_redact_masks_tokens_keys_and_signatures():
    text = ("token ghs_abcdefghijklmnopqrstuvwxyz0123 sig sha256=" + "a" * 64 +
            " Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjMifQ.c2lnbmF0dXJlLXNpZw"
            " -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----")
    out = redact(text)
    for secret in ("ghs_abcdefghijklmnopqrstuvwxyz0123", "a" * 64, "eyJhbGciOiJSUzI1NiJ9", "MIIE"):
        assert secret not in out


def test_json_logs_carry_delivery_repo_pr_and_no_secrets(tmp_path, fake_github):
    stream = io.StringIO()
    handler = configure_logging("json", "DEBUG", stream=stream)
    try:
        with log_context(delivery_id="abc", repo="pytorch/pytorch", pr=5):
            logging.getLogger("crcr.test").info("hello %s", "ghs_0123456789abcdef0123")
        line = json.loads(stream.getvalue().splitlines()[-1])
        assert line["delivery_id"] == "abc" and line["repo"] == "pytorch/pytorch" and line["pr"] == 5
        assert "ghs_0123456789abcdef0123" not in line["msg"]
        # a whole flow: intake + a dispatch with an App key and a token; none of it in the logs
        settings = make_settings(tmp_path, allowlist="L1:\n  - org/a\n", github_url=fake_github.url,
                                 app_id=fake_github.app_id, key=fake_github.private_key_pem)
        fake_github.add_fault("POST", r"/dispatches$", status=502)
        from relay import dispatch

        with TestClient(create_app(settings, start_worker=False, start_sweeper=False)) as client:
            runtime = client.app.state.runtime
            post_webhook(client, "pull_request", pr_payload(), delivery="log-1")
            post_webhook(client, "pull_request", pr_payload(), delivery="log-2", secret="wrong")
            from tests.relay.harness import rows

            dispatch.attempt(runtime, rows(runtime, "log-1")[0].id)
    finally:
        logging.getLogger("crcr").removeHandler(handler)
    logs = stream.getvalue()
    tokens = list(fake_github.state.tokens)
    assert tokens
    assert "log-1" in logs and "retrying" in logs
    for secret in (SECRET, fake_github.private_key_pem.splitlines()[1], *tokens):
        assert secret not in logs
    for rec in fake_github.calls():
        assert rec.headers.get("authorization", "").split(" ")[-1] not in logs


@pytest.mark.slow
def test_processes_starting_together_all_see_a_migrated_schema(database_url, tmp_path):
    """Replicas of `crcr worker` migrate on start at the same moment: none of them fails."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env.update(CRCR_DATABASE_URL=database_url, CRCR_DATA_DIR=str(tmp_path / "data"))
    procs = [subprocess.Popen([sys.executable, "-m", "crcr.cli.main", "db", "upgrade"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) is not None
    finally:
        engine.dispose()
