"""The allowlist: CRCR's L1-L4 format unchanged, crcr's extensions, errors, file and URL sources."""

from __future__ import annotations

import http.server
import threading

import pytest

from crcr.errors import ConfigError
from relay.allowlist import AllowlistSource, default_allowlist_path, parse_allowlist_text

CRCR_EXAMPLE = """\
L1: [org1/repo1]                      # dispatch only
L2: [org2/repo2]                      # + results recorded (dashboard / HUD)
L3:                                   # + non-blocking check run when the PR carries
  device1:                            #   the label ciflow/crcr/device1
    org3/repo3: [oncall1, oncall2]
L4:
  - org4/repo4: oncall1, oncall2      # + check run on every PR (blocking)
"""


def test_crcr_format_is_read_unchanged():
    allow = parse_allowlist_text(CRCR_EXAMPLE)
    assert [(t.repo, t.level) for t in allow] == [("org1/repo1", 1), ("org2/repo2", 2), ("org3/repo3", 3),
                                                  ("org4/repo4", 4)]
    assert allow.level_of("org3/repo3") == 3 and allow.level_of("nobody/else") is None
    assert allow.devices() == {"device1": ["org3/repo3"]}
    assert allow.oncalls("org4/repo4") == ("oncall1", "oncall2")
    assert allow.oncalls("org3/repo3") == ("oncall1", "oncall2")
    assert all(t.kind == "github" and not t.untrusted for t in allow)


def test_shipped_default_allowlist_has_a_working_local_target():
    allow = parse_allowlist_text(default_allowlist_path().read_text())
    (t,) = list(allow)
    assert t.kind == "local" and t.command[:2] == ("crcr", "downstream")


def test_extensions_filters_trust_and_local_targets():
    allow = parse_allowlist_text(CRCR_EXAMPLE + """\
crcr:
  untrusted_associations: [NONE]
  targets:
    org1/repo1:
      events: [push, pull_request.closed]
      paths: ["aten/**"]
    org4/repo4:
      untrusted: true
      kind: local
      command: [echo, hi]
      timeout_s: 5
""")
    t1 = allow.targets["org1/repo1"]
    assert t1.wants_event("push", None) and t1.wants_event("pull_request", "closed")
    assert not t1.wants_event("pull_request", "opened")
    assert t1.wants_paths(["aten/src/x.cpp"]) and not t1.wants_paths(["docs/a.md"]) and t1.wants_paths(None)
    t4 = allow.targets["org4/repo4"]
    assert (t4.kind, t4.command, t4.timeout_s, t4.untrusted) == ("local", ("echo", "hi"), 5.0, True)
    assert allow.untrusted_associations == frozenset({"NONE"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("L1: [org/a]\nL2: [org/a]\n", "L2: duplicate repo 'org/a'"),
        ("L1: [not-a-repo]\n", "L1[0]: 'not-a-repo' is not an owner/repo name"),
        ("L1: [../../x]\n", "is not an owner/repo name"),
        ("L3: [org/a]\n", "L3: must be a mapping of device"),
        ("L4:\n  - org/a: {x: 1}\n", "oncalls must be"),
        ("L1: [org/a]\ncrcr:\n  targets:\n    org/b: {}\n", "crcr.targets.org/b: this repo is not in L1..L4"),
        ("L1: [org/a]\ncrcr:\n  targets:\n    org/a: {kind: local, command: 'rm -rf /'}\n", "never a shell string"),
        ("L1: [org/a]\ncrcr:\n  targets:\n    org/a: {command: [x]}\n", "only for kind: local"),
        ("L1: [org/a]\ncrcr:\n  targets:\n    org/a: {events: [issues]}\n", "events must be"),
        ("L1: [org/a]\ncrcr:\n  targets:\n    org/a: {colour: red}\n", "unknown keys ['colour']"),
        ("L1: [org/a\n", "not valid YAML"),
    ],
)
def test_errors_name_the_entry_and_say_what_is_wrong(text, message):
    with pytest.raises(ConfigError) as err:
        parse_allowlist_text(text)
    assert message in str(err.value)
    assert err.value.hint


def test_file_source_picks_up_edits_and_keeps_the_last_good_copy(tmp_path):
    path = tmp_path / "allow.yaml"
    path.write_text("L1: [org/a]\n")
    src = AllowlistSource(str(path), ttl_s=3600)
    assert src.get().level_of("org/a") == 1
    path.write_text("L4: [org/a]\n")
    import os

    os.utime(path, (1, 1))  # make sure the mtime differs even on coarse clocks
    assert src.get().level_of("org/a") == 4
    path.write_text("L1: [broken\n")
    os.utime(path, (2, 2))
    assert src.get().level_of("org/a") == 4  # refresh failed: last good copy served


def test_missing_file_on_first_load_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the allowlist"):
        AllowlistSource(str(tmp_path / "nope.yaml")).get()


def test_url_source_is_cached_for_its_ttl(tmp_path):
    body = {"text": b"L2: [org/a]\n"}
    hits = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body["text"])))
            self.end_headers()
            self.wfile.write(body["text"])

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    now = [0.0]
    try:
        src = AllowlistSource(f"http://127.0.0.1:{server.server_address[1]}/allow.yaml", ttl_s=60,
                              clock=lambda: now[0])
        assert src.get().level_of("org/a") == 2
        body["text"] = b"L3:\n  npu:\n    org/a: x\n"
        now[0] = 30
        assert src.get().level_of("org/a") == 2 and len(hits) == 1  # cached
        now[0] = 61
        assert src.get().level_of("org/a") == 3 and len(hits) == 2  # refreshed after the TTL
        server.shutdown()
        server.server_close()
        now[0] = 200
        assert src.get().level_of("org/a") == 3  # unreachable: the last good copy stays
    finally:
        server.server_close()


def test_plain_http_to_a_remote_host_is_refused():
    with pytest.raises(ConfigError, match="plain http"):
        AllowlistSource("http://example.com/allow.yaml").get()
