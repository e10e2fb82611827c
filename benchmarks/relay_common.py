"""Shared helpers of the relay benchmarks: start `crcr serve` (or any server) on port 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_server(argv: list[str], env: dict[str, str], timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start a server that logs `http://127.0.0.1:PORT`; return (process, base URL)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    full_env.update(env)
    proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if m:
            # keep draining its output so the pipe never fills and blocks the server
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1)
    proc.kill()
    raise RuntimeError("server did not start:\n" + "".join(lines))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]
