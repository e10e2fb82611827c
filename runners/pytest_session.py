"""How crcr starts a pytest session on tests: the run's child, the inventory's collection and the planner's trace
all load a test file through the same options, so a checkout's ``conftest.py`` (its module code and its hooks) does
the same for each of them."""

from __future__ import annotations

from pathlib import Path

from runners.suites import EMBEDDED_ROOT


def session_args(root: Path, workdir: Path, embedded: bool) -> list[str]:
    """crcr's plugin, no cache and no faulthandler of pytest's, ``root`` as the rootdir and a config: the embedded
    suite's own, or for a checkout a blank one written in ``workdir`` (upstream's pytest.ini may name plugins that are
    not installed here)."""
    argv = ["-p", "runners.plugin", "-p", "no:faulthandler", "-p", "no:cacheprovider", "--rootdir", str(root)]
    if embedded:
        return [*argv, "-c", str(EMBEDDED_ROOT / "pytest.ini")]
    blank = workdir / "pytest.ini"
    blank.write_text("[pytest]\n", encoding="utf-8")
    return [*argv, "-c", str(blank)]
