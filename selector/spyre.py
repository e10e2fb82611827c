"""Interoperate with torch-spyre's ``test_suite_config`` YAML.

Its shape (from torch-spyre's tests/configs)::

    test_suite_config:
      files:
        - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py
          unlisted_test_mode: skip
          tests:
            - names: [TestBinaryUfuncs::test_scalar_support, ...]
              mode: mandatory_success      # | skip | xfail | xfail_strict
              tags: [...]
              edits: {ops: ..., dtypes: ...}
      global: {supported_dtypes: [...], supported_ops: [...]}

``mandatory_success`` is our ``run``. Spyre names the generic test
(``Class::test``), which covers every device/dtype instantiation; on import it becomes
a pattern over our instantiated ids. On export, groups sharing a mode and reason
become one ``names`` list with the reason as a comment; patterns are expanded against
an inventory when one is given (Spyre has no patterns) and reported otherwise.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from crcr.contracts.inventory import Inventory
from crcr.contracts.plan import Plan, parse_plan_file
from selector.errors import SelectorInputError

TO_SPYRE = {"run": "mandatory_success", "skip": "skip", "xfail": "xfail", "xfail_strict": "xfail_strict"}
FROM_SPYRE = {v: k for k, v in TO_SPYRE.items()}
ROOT_VAR = "${TORCH_ROOT}/"


def export_spyre(plan: Plan, inventory: Inventory | None = None) -> tuple[str, list[str]]:
    """Spyre YAML for a plan, and notes about what could not be expressed."""
    notes: list[str] = []
    files = CommentedSeq()
    tests_by_file: dict[str, list[str]] = defaultdict(list)
    if inventory is not None:
        for t in inventory.tests:
            tests_by_file[t.file].append(t.relative_id)
    for pf in plan:
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        if inventory is not None:
            for rel in sorted(tests_by_file.get(pf.upstream.file, [])):
                d = pf.resolve(rel)
                if d.source != "default":
                    groups[(d.mode, d.reason)].append(rel)
        else:
            for e in pf.tests:
                if e.regex is not None:
                    notes.append(f"{pf.upstream.file}: pattern {e.id!r} not exported (pass --inventory to expand it)")
                    continue
                groups[(pf.resolve(e.id).mode, pf.resolve(e.id).reason)].append(e.id)
        tests = CommentedSeq()
        for (mode, reason), names in sorted(groups.items()):
            item = CommentedMap()
            item["names"] = CommentedSeq(sorted(set(names)))
            item["mode"] = TO_SPYRE[mode]
            tests.append(item)
            tests.yaml_set_comment_before_after_key(len(tests) - 1, before=reason.replace("\n", " ")[:300], indent=8)
        entry = CommentedMap()
        entry["path"] = ROOT_VAR + pf.upstream.file
        entry["unlisted_test_mode"] = TO_SPYRE[pf.defaults.mode]
        entry["tests"] = tests
        files.append(entry)
    doc = CommentedMap()
    doc["test_suite_config"] = CommentedMap([("files", files)])
    y = YAML()
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue(), notes


def _name_pattern(name: str) -> str:
    cls, method = name.split("::", 1)
    # Spyre names the generic test; ours are instantiated per device and dtype.
    return f"{re.escape(cls)}(PRIVATEUSE1)?::{re.escape(method)}(_.*)?"


def import_spyre(text: str, backend: str, where: str = "<spyre>") -> tuple[dict[str, str], list[str]]:
    """Plan file texts by upstream file, and notes about entries that could not be imported."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SelectorInputError(f"{where}: not valid YAML ({exc})") from None
    cfg = data.get("test_suite_config") if isinstance(data, dict) else None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("files"), list):
        raise SelectorInputError(f"{where}: no test_suite_config.files list", hint="is this a torch-spyre test config?")
    out: dict[str, str] = {}
    notes: list[str] = []
    for i, f in enumerate(cfg["files"]):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            notes.append(f"{where}: files[{i}] has no path; skipped")
            continue
        upstream = f["path"].replace(ROOT_VAR, "").lstrip("/")
        entries: list[dict[str, Any]] = []
        for j, group in enumerate(f.get("tests") or []):
            mode = FROM_SPYRE.get(group.get("mode")) if isinstance(group, dict) else None
            if mode is None:
                notes.append(f"{where}: {upstream} tests[{j}] has an unknown mode; skipped")
                continue
            edits = " (with dtype/op edits in the Spyre config)" if group.get("edits") else ""
            for name in group.get("names") or []:
                if not isinstance(name, str) or "::" not in name:
                    notes.append(f"{where}: {upstream}: name {name!r} is not Class::test; skipped")
                    continue
                method = name.split("::", 1)[1]
                instantiated = re.search(rf"_{re.escape(backend)}(_|$)", method) is not None
                # an instantiated name (what our export writes) stays exact; a generic one covers its variants
                entries.append({"id": name if instantiated else _name_pattern(name), "mode": mode, "source": "reviewer",
                                "reason": f"imported from torch-spyre test_suite_config: {group['mode']} for {name}{edits}"})
        unlisted = FROM_SPYRE.get(f.get("unlisted_test_mode", "skip"), "skip")
        doc = {
            "schema_version": 1, "backend": backend, "upstream": {"file": upstream},
            "defaults": {"mode": unlisted, "reason": "unlisted in the torch-spyre config"},
            "tests": entries,
        }
        rendered = yaml.safe_dump(doc, sort_keys=False, width=4096)
        parse_plan_file(rendered, f"{where}:{upstream}")  # what we write must load
        out[upstream] = rendered
    return out, notes

