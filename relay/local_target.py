"""The ``local`` target kind: run a configured argv with the client_payload on stdin.

The command is a list of arguments from the allowlist (never a shell string, never
built from webhook data); the payload reaches it only as JSON on standard input. It inherits only an
allowlisted environment (``PASSED_ENV``): the relay's secrets stay with the relay. A
leading ``crcr`` runs this same installation (``python -m crcr.cli.main``) so the
embedded default works from a virtualenv that is not on ``PATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

# What a local command inherits from the relay's environment: enough to find programs,
# a locale, a temp dir and this installation's Python; never the App key, the webhook
# secret, the database URL or any other CRCR_* setting (it gets CRCR_DATA_DIR from the
# caller, explicitly).
# A local downstream also needs to call back: the relay's public URL (not a secret) and, where
# the relay runs with a job identity (a CI job, or `crcr demo`'s local issuer), the OIDC token
# request variables GitHub Actions gives a job, so `crcr report` can authenticate as that job.
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP", "PYTHONPATH",
              "VIRTUAL_ENV", "SYSTEMROOT", "USER", "LOGNAME",
              "CRCR_PUBLIC_URL", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def local_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a local command: ``PASSED_ENV`` from the relay, plus ``extra``."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    return {**env, **(extra or {})}


@dataclass(frozen=True)
class LocalResult:
    exit_code: int | None  # None: killed after the timeout
    stderr_tail: str


def resolve_argv(command: tuple[str, ...] | list[str]) -> list[str]:
    argv = list(command)
    if argv and argv[0] == "crcr":
        argv = [sys.executable, "-m", "crcr.cli.main", *argv[1:]]
    return argv


def run_local(command: tuple[str, ...] | list[str], client_payload: dict[str, Any], *, timeout_s: float,
              env: dict[str, str] | None = None) -> LocalResult:
    """Run ``command`` once; the caller turns a non-zero exit into a retry."""
    data = json.dumps(client_payload).encode("utf-8")
    full_env = local_env(env)
    try:
        proc = subprocess.run(resolve_argv(command), input=data, capture_output=True, timeout=timeout_s,
                              env=full_env, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-2000:].decode("utf-8", "replace")
        return LocalResult(None, tail)
    except OSError as exc:
        return LocalResult(127, f"cannot start {command[0]!r}: {exc.strerror}")
    return LocalResult(proc.returncode, proc.stderr[-2000:].decode("utf-8", "replace"))
