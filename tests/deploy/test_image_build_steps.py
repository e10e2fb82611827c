"""The Dockerfile's build steps, run here as far as this machine allows (there is no Docker engine).

What runs for real: the build context as ``Dockerfile.dockerignore`` leaves it; stage 1's
``pip wheel --no-deps`` in that context; stage 2's install of the wheel at
``CRCR_VERSION`` from ``--find-links``; the shipped allowlist copied where the image puts
it; then the image's ``ENTRYPOINT``/``CMD`` (``crcr serve``) with the image's ``ENV``
from its ``WORKDIR``, torch made unimportable, and its ``HEALTHCHECK`` command.

What does not: the base image, ``useradd``, ``USER 10001`` and the layer filesystem.
Offline differences: ``pip wheel`` gets ``--no-build-isolation`` (build isolation would
download setuptools), and the install uses ``--no-deps`` with the dependencies of this
environment (the image resolves them from PyPI).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"


def _context(dest: Path) -> list[str]:
    """Copy the files the dockerignore lets through (last matching rule wins, as BuildKit does)."""
    rules = []
    for line in IGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!")))
    kept = []
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        if not (ROOT / rel).is_file():
            continue
        keep = True  # what no rule matches is sent
        for negate, pattern in rules:
            if fnmatch.fnmatch(rel, pattern):  # fnmatch's * crosses "/", like ** here
                keep = negate
        if keep:
            kept.append(rel)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return kept


def _env_of_image() -> dict[str, str]:
    text = DOCKERFILE.read_text()
    block = re.search(r"^ENV (.+?)(?=^\S)", text, re.M | re.S)[1]
    return dict(re.findall(r"(\w+)=(\S+)", block))


def test_the_image_build_steps_produce_a_relay_that_serves_without_torch(tmp_path: Path) -> None:
    src = tmp_path / "src"
    kept = _context(src)
    assert "pyproject.toml" in kept and "configs/allowlist.yaml" in kept
    assert not any(k.startswith(("tests/", "deploy/", "benchmarks/")) for k in kept)
    # stage 1: RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(wheels), "."], cwd=src, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    version = re.search(r"ARG CRCR_VERSION=(\S+)", DOCKERFILE.read_text())[1]
    (wheel,) = wheels.glob(f"crcr-{version}-*.whl")  # the version the image pins is the one built
    names = zipfile.ZipFile(wheel).namelist()
    assert "relay/dashboard/pages.py" in names and "crcr/data/demo/pull_request.opened.json" in names
    # stage 2: RUN pip install --find-links /wheels "crcr[postgres,redis,fast]==${CRCR_VERSION}" (deps: this env's)
    site = tmp_path / "image-site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                        "--find-links", str(wheels), f"crcr=={version}"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    etc = tmp_path / "etc-crcr"
    etc.mkdir()
    shutil.copy2(src / "configs/allowlist.yaml", etc / "allowlist.yaml")  # COPY configs/allowlist.yaml /etc/crcr/
    blocker = tmp_path / "no-torch"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch is not in the relay image')\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path / "var-lib-crcr"
    workdir.mkdir()
    image_env = _env_of_image()
    assert image_env["CRCR_DATA_DIR"] == "/var/lib/crcr" and image_env["CRCR_ALLOWLIST"] == "/etc/crcr/allowlist.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    env.update(image_env)
    env.update({"CRCR_DATA_DIR": str(workdir), "CRCR_ALLOWLIST": str(etc / "allowlist.yaml"), "CRCR_PORT": str(port),
                "CRCR_HOST": "127.0.0.1", "CRCR_WEBHOOK_SECRET": "image-test",
                "PYTHONPATH": os.pathsep.join([str(blocker), str(site)])})
    # ENTRYPOINT ["crcr"] CMD ["serve"], from WORKDIR /var/lib/crcr, code from the installed wheel only
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from crcr.cli.main import main; sys.argv[0] = 'crcr'; main()",
                             "serve"], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        up = False
        for _ in range(300):
            try:
                up = httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200
            except httpx.HTTPError:
                pass
            if up or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert up, proc.stdout.read().decode()[-3000:] if proc.poll() is not None else "not up"
        # HEALTHCHECK CMD, verbatim from the Dockerfile
        health = re.search(r'CMD \["python", "-c", "(.+)"\]\s*$', DOCKERFILE.read_text(), re.M)[1]
        health = health.encode().decode("unicode_escape")
        r = subprocess.run([sys.executable, "-c", health], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert httpx.get(f"http://127.0.0.1:{port}/dashboard").status_code == 200
        loaded = httpx.get(f"http://127.0.0.1:{port}/readyz").status_code
        assert loaded == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # the code that served came from the wheel, not from this checkout
    assert (site / "relay" / "app.py").is_file()
