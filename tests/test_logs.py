"""crcr's log handler follows the current stderr instead of the one at configuration time."""
import io
import logging
import sys

from crcr.logs import configure_logging


def test_logging_after_stderr_was_replaced_and_closed_goes_to_the_new_stderr(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("text")
    first.close()  # e.g. a test's capture of an in-process CLI call ended
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("crcr.test").warning("still visible")
    assert "still visible" in second.getvalue()
    assert "Logging error" not in second.getvalue()
