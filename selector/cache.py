"""The plan's caches in the data directory: decisions by fingerprint, and the last plan's state.

Both are keyed by a context digest (capability file, disabled list, rules version, the
deciding code, agent and model), so any change to what decides invalidates them. They
only save time: the YAML plan files stay the truth.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crcr.contracts.inventory import InventoryTest
from crcr.fileio import atomic_write_text
from selector.agent.base import Agent
from selector.capabilities import Capabilities
from selector.disabled import DisabledTests
from selector.fingerprint import digest
from selector.rules import RULES_VERSION

CACHE_VERSION = "1"


@dataclass
class Decided:
    mode: str
    reason: str
    source: str  # rules | agent
    fingerprint: str
    rule: str | None = None
    pattern: str | None = None
    confidence: str | None = None
    evidence: dict[str, str] | None = None


class DecisionCache:
    """Decisions by test id and fingerprint, plus per-file input/output digests."""

    def __init__(self, path: Path, context: str) -> None:
        self.path = path
        self.context = context
        self.decisions: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, str]] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("version") == CACHE_VERSION and data.get("context") == context:
                    self.decisions = data.get("decisions", {})
                    self.files = data.get("files", {})
            except (OSError, json.JSONDecodeError):
                pass  # a broken cache is only a slower run

    def get(self, test: InventoryTest) -> Decided | None:
        hit = self.decisions.get(test.id)
        if hit and hit.get("fingerprint") == test.fingerprint:
            return Decided(**hit)
        return None

    def put(self, test_id: str, decided: Decided) -> None:
        self.decisions[test_id] = asdict(decided)

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(
            {"version": CACHE_VERSION, "context": self.context, "decisions": self.decisions, "files": self.files},
            sort_keys=True, separators=(",", ":"),
        ))


def _code_digest(agent: Agent) -> str:
    """The deciding code itself: editing a rule or the agent invalidates cached decisions."""
    import inspect

    from selector import rules

    parts = [Path(rules.__file__).read_bytes()]
    agent_file = inspect.getsourcefile(type(agent))
    if agent_file:
        parts.append(Path(agent_file).read_bytes())
    return digest(*parts)


def context_digest(caps: Capabilities, disabled: DisabledTests | None, agent: Agent) -> str:
    disabled_digest = hashlib.sha256(disabled.path.read_bytes()).hexdigest()[:16] if disabled else "-"
    model = getattr(agent, "model", "")
    return digest(CACHE_VERSION, RULES_VERSION, _code_digest(agent), caps.digest, disabled_digest, agent.name, model)


def _state_path(data_dir: Path, backend: str, out_dir: Path) -> Path:
    return data_dir / "selector" / f"plan-state-{backend}-{digest(str(out_dir.resolve()))}.json"


def _files_digest(out_dir: Path) -> str:
    h = hashlib.sha256()
    if out_dir.is_dir():
        for p in sorted(out_dir.rglob("*.yaml")):
            h.update(str(p.relative_to(out_dir)).encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def up_to_date(inventory_digest: str, context: str, backend: str, out_dir: Path, data_dir: Path) -> bool:
    """True when the last plan used this very inventory and context and its files are untouched.

    The check reads only digests (no inventory parsing, no classification), which is what
    makes re-planning an unchanged inventory cheap.
    """
    state = _state_path(data_dir, backend, out_dir)
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return (data.get("inventory") == inventory_digest and data.get("context") == context
            and data.get("files") == _files_digest(out_dir))


def record_state(inventory_digest: str, context: str, backend: str, out_dir: Path, data_dir: Path) -> None:
    atomic_write_text(_state_path(data_dir, backend, out_dir), json.dumps(
        {"inventory": inventory_digest, "context": context, "files": _files_digest(out_dir)}, sort_keys=True))
