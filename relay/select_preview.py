"""``/ci select``: what each backend would run for this PR, and why.

Runs ``crcr select pick`` as a subprocess per backend configured under the
allowlist's ``crcr.commands.select`` (plan directory, inventory, optional budget),
with the PR's diff from GitHub, a minimal environment (no relay secrets) and a
timeout. Without a configured plan it says so: every backend runs its full suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from crcr.github.comments import pull_diff

TIMEOUT_S = 120
MAX_LINES = 14
_ENV_KEEP = ("PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "TMPDIR")


def preview(runtime: Any, gh: Any, pr: int, head: str, targets: set[str] | None) -> tuple[str, bool]:
    """Markdown answer and whether every preview ran."""
    specs = runtime.allowlist.get().commands.select
    chosen = {r: s for r, s in sorted(specs.items()) if targets is None or r in targets}
    if not chosen:
        which = f" for {', '.join(sorted(targets))}" if targets else ""
        return (f"`/ci select`: no test selection plan is configured{which} (the allowlist's "
                "`crcr.commands.select`), so each backend runs its full suite.", True)
    diff = pull_diff(gh, runtime.settings.upstream_repo, pr)
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
    parts, ok = [f"What would run for head {head[:12]}:"], True
    with tempfile.TemporaryDirectory(prefix="crcr-select-") as tmp:
        diff_path = Path(tmp) / "pr.diff"
        diff_path.write_text(diff, encoding="utf-8")
        for repo, spec in chosen.items():
            out = Path(tmp) / f"pick-{len(parts)}.json"
            cmd = [sys.executable, "-c", "from crcr.cli.main import main; main()", "select", "pick",
                   "--diff", str(diff_path), "--inventory", spec.inventory, "--plan", spec.plan,
                   "--backend", spec.backend, "--out", str(out), "--pr", str(pr)]
            if spec.budget_s:
                cmd += ["--budget", str(spec.budget_s)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False)
                text, good = (done.stdout if done.returncode == 0 else (done.stderr or done.stdout)), done.returncode == 0
            except subprocess.TimeoutExpired:
                text, good = f"timed out after {TIMEOUT_S}s", False
            ok &= good
            lines = [ln.replace("`", "'")[:300] for ln in text.strip().splitlines()[:MAX_LINES]]
            status = "" if good else " (the pick failed)"
            parts += ["", f"**{repo}** ({spec.backend}){status}:", "```text", *lines, "```"]
    return "\n".join(parts), ok
