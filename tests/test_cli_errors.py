"""Cross-cutting CLI errors: bad settings, database URLs, allowlists and output paths.

Each prints ``error[...]: what happened`` and a ``hint:``, exits 2, shows no traceback,
never echoes a secret, and leaves nothing behind.
"""

from __future__ import annotations

import pytest

from crcr.cli.main import main
from crcr.settings import get_settings


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    for name in ("CRCR_DATABASE_URL", "CRCR_CONFIG", "CRCR_ALLOWLIST", "CRCR_PORT", "CRCR_LOG_LEVEL",
                 "CRCR_WEBHOOK_SECRET", "CRCR_QUEUE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRCR_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _run(argv, capsys):
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code or 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("CRCR_PORT", "abc", "CRCR_PORT: Input should be a valid integer"),
        ("CRCR_PORT", "70000", "CRCR_PORT: Input should be less than or equal to 65535"),
        ("CRCR_LOG_LEVEL", "LOUD", "CRCR_LOG_LEVEL: log_level must be one of DEBUG"),
        ("CRCR_WORKERS", "0", "CRCR_WORKERS: Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_setting_names_the_variable(clean_env, monkeypatch, capsys, name, value, expected):
    monkeypatch.setenv(name, value)
    code, err = _run(["dispatches", "list"], capsys)
    assert code == 2
    assert "error[bad-config]: invalid settings: " + expected in err
    assert "hint: " in err and "pydantic.dev" not in err
    assert not (clean_env / "data").exists()


def test_a_bad_secret_in_the_config_file_is_not_echoed(clean_env, monkeypatch, capsys):
    cfg = clean_env / "crcr.yaml"
    cfg.write_text("webhook_secret: [hunter2, s3cret]\n")
    monkeypatch.setenv("CRCR_CONFIG", str(cfg))
    code, err = _run(["dispatches", "list"], capsys)
    assert code == 2 and "CRCR_WEBHOOK_SECRET" in err
    assert "hunter2" not in err and "s3cret" not in err


def test_log_level_is_case_insensitive(clean_env, monkeypatch):
    monkeypatch.setenv("CRCR_LOG_LEVEL", "debug")
    assert get_settings().log_level == "DEBUG"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("garbage", "CRCR_DATABASE_URL is not a database URL"),
        ("foo://user:hunter2@host/db", "CRCR_DATABASE_URL names an unknown database 'foo'"),
        ("mysql://user:hunter2@127.0.0.1:1/db", "the driver for CRCR_DATABASE_URL (mysql) is not installed"),
    ],
)
def test_a_bad_database_url_is_a_config_error_without_the_password(clean_env, monkeypatch, capsys, url, expected):
    monkeypatch.setenv("CRCR_DATABASE_URL", url)
    code, err = _run(["dispatches", "list"], capsys)
    assert code == 2
    assert f"error[bad-config]: {expected}" in err and "hint: " in err
    assert "hunter2" not in err


def test_a_data_dir_that_cannot_be_created(clean_env, monkeypatch, capsys):
    blocker = clean_env / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CRCR_DATA_DIR", str(blocker))
    code, err = _run(["db", "upgrade"], capsys)
    assert code == 2
    assert f"error[bad-config]: cannot create the database directory {blocker}: a file is in the way" in err
    assert "hint: set CRCR_DATA_DIR" in err


def test_serve_rejects_an_out_of_range_port_before_binding(clean_env, capsys):
    code, err = _run(["serve", "--port", "70000"], capsys)
    assert code == 2 and "--port" in err
    code, err = _run(["serve", "--workers", "0"], capsys)
    assert code == 2 and "--workers" in err


@pytest.mark.parametrize(
    ("allowlist", "expected"),
    [
        ("missing.yaml", "cannot read the allowlist"),
        ("bad.yaml", "not valid YAML"),
        ("wrong.yaml", "expected a mapping with keys L1..L4"),
    ],
)
def test_serve_stops_on_an_unreadable_allowlist_before_writing_anything(clean_env, monkeypatch, capsys,
                                                                       allowlist, expected):
    (clean_env / "bad.yaml").write_text("L1: [\n")
    (clean_env / "wrong.yaml").write_text("- just a list\n")
    monkeypatch.setenv("CRCR_ALLOWLIST", str(clean_env / allowlist))
    code, err = _run(["serve", "--port", "0"], capsys)
    assert code == 2
    assert "error[bad-config]" in err and expected in err and "hint: " in err
    assert not (clean_env / "data").exists()  # no database, queue or generated secret


def test_run_refuses_an_unwritable_output_before_running(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = _run(["run", "--device", "cpu", "--results", str(blocker / "r.json")], capsys)
    assert code == 2
    assert f"error[bad-input]: cannot write {blocker / 'r.json'}" in err and "hint: " in err


def test_snpu_capabilities_refuses_an_unwritable_out_before_the_sweep(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = _run(["snpu", "capabilities", "--out", str(blocker / "cap.yaml")], capsys)
    assert code == 2
    assert f"error[bad-input]: cannot write {blocker / 'cap.yaml'}: a file is in the way" in err


def test_atomic_write_into_an_impossible_folder_is_an_input_error(tmp_path):
    from crcr.errors import InputError
    from crcr.fileio import atomic_write_text

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        atomic_write_text(blocker / "x.json", "{}")
    assert blocker.read_text() == ""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--timeout", "0"], "--timeout 0.0: must be positive"),
        (["run", "--matrix", "0"], "--matrix 0: the number of shards must be at least 1"),
        (["report", "--callback", "not-a-url", "--token", "t0ps3cret", "--delivery-id", "d", "--phase", "start"],
         "--callback 'not-a-url' is not an http(s) URL"),
        (["report", "--callback", "https://relay.example/callback", "--token", "t0ps3cret", "--delivery-id", "d",
          "--phase", "bogus"], "--phase 'bogus' is not a phase"),
        (["report", "--callback", "https://relay.example/callback", "--token", "t0ps3cret", "--delivery-id", "d",
          "--results", "{bad}"], "not valid JSON"),
        (["select", "import", "--backend", "snpu", "{missing}"], "does not exist"),
    ],
)
def test_bad_input_comes_with_a_hint(tmp_path, capsys, argv, expected):
    (tmp_path / "bad.json").write_text("{bad")
    argv = [a.replace("{bad}", str(tmp_path / "bad.json")).replace("{missing}", str(tmp_path / "nope.yaml"))
            for a in argv]
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert expected in err and "\nhint: " in err
    assert "t0ps3cret" not in err


def test_select_plan_with_a_disabled_tests_file_that_is_not_an_object(tmp_path, capsys):
    disabled = tmp_path / "disabled.json"
    disabled.write_text("[1, 2]")
    code, err = _run(["select", "plan", "--backend", "snpu", "--disabled", str(disabled),
                      "--out", str(tmp_path / "plan")], capsys)
    assert code == 2
    assert "expected a JSON object, got list" in err and "\nhint: " in err
    assert not (tmp_path / "plan").exists()


def test_serve_on_a_port_in_use_is_a_config_error_before_anything_is_written(clean_env, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = _run(["serve", "--host", "127.0.0.1", "--port", str(port)], capsys)
    assert code == 2
    assert f"error[bad-config]: cannot listen on 127.0.0.1:{port}" in err and "\nhint: " in err
    assert not (clean_env / "data").exists()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("CRCR_OIDC_ISSUERS", "https://issuer.example", "CRCR_OIDC_ISSUERS could not be parsed"),
        ("CRCR_MAX_WEBHOOK_BYTES", "-1", "CRCR_MAX_WEBHOOK_BYTES: Input should be greater than 0"),
    ],
)
def test_more_bad_settings(clean_env, monkeypatch, capsys, name, value, expected):
    monkeypatch.setenv(name, value)
    code, err = _run(["dispatches", "list"], capsys)
    assert code == 2 and f"error[bad-config]: invalid settings: {expected}" in err and "\nhint: " in err
