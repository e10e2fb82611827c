"""``crcr select check``: validate hand-edited plan files, ``file:line: problem; what to do``.

Files are parsed with PyYAML's *composer* only (a node tree with line numbers; no
object is constructed, so ``!!python/object`` and friends are reported, never run),
then checked against the plan contract entry by entry. With ``--inventory`` it also
reports patterns that match no test and exact ids the inventory does not have.
Fit for a pre-commit hook and CI: non-zero exit when anything is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from crcr.contracts.inventory import Inventory
from crcr.contracts.plan import MAX_PLAN_BYTES, MODES, SOURCE_RANK, SOURCES, is_pattern, plan_path_for

TOP_KEYS = {"schema_version", "backend", "upstream", "defaults", "tests"}
ENTRY_KEYS = {"id", "mode", "reason", "source", "evidence", "fingerprint", "confidence", "proposal"}
SAFE_TAGS = re.compile(r"^tag:yaml\.org,2002:(str|int|float|bool|null|map|seq|timestamp)$")
MAX_FINDINGS_PER_FILE = 200


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    message: str
    hint: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}; {self.hint}"


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _scalar(node: Node | None) -> str | None:
    return node.value if isinstance(node, ScalarNode) else None


def _unsafe_tags(node: Node, found: list[Node], depth: int = 0) -> None:
    if depth > 64:
        return
    if not SAFE_TAGS.match(node.tag or ""):
        found.append(node)
    if isinstance(node, MappingNode):
        for k, v in node.value:
            _unsafe_tags(k, found, depth + 1)
            _unsafe_tags(v, found, depth + 1)
    elif isinstance(node, SequenceNode):
        for v in node.value:
            _unsafe_tags(v, found, depth + 1)


def _mapping(node: MappingNode) -> dict[str, tuple[Node, Node]]:
    out: dict[str, tuple[Node, Node]] = {}
    for k, v in node.value:
        key = _scalar(k)
        if key is not None:
            out[key] = (k, v)
    return out


class _FileChecker:
    def __init__(self, path: Path, shown: str, root: Path | None, inventory: Inventory | None) -> None:
        self.path = path
        self.shown = shown
        self.root = root
        self.inventory = inventory
        self.findings: list[Finding] = []

    def add(self, line: int, message: str, hint: str, severity: str = "error") -> None:
        if len(self.findings) < MAX_FINDINGS_PER_FILE:
            self.findings.append(Finding(self.shown, line, message, hint, severity))

    def run(self) -> list[Finding]:
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            self.add(1, f"cannot read the file ({exc.strerror})", "check the path and permissions")
            return self.findings
        if size > MAX_PLAN_BYTES:
            self.add(1, f"file is {size // (1024 * 1024)} MiB, over the {MAX_PLAN_BYTES // (1024 * 1024)} MiB limit",
                     "split it, or replace runs of single entries by pattern entries")
            return self.findings
        raw = self.path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            self.add(line, "the file is not UTF-8", "save it as UTF-8")
            return self.findings
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else 1
            self.add(line, f"not valid YAML: {exc.problem or exc.context}", "fix the syntax (indentation, quotes, colons)")
            return self.findings
        except yaml.YAMLError as exc:
            self.add(1, f"not valid YAML: {str(exc).splitlines()[0]}", "fix the syntax")
            return self.findings
        except RecursionError:
            self.add(1, "YAML nesting is too deep", "plan files are flat; remove the nesting")
            return self.findings
        if root is None:
            self.add(1, "the file is empty", "write schema_version, backend, upstream and tests, or delete it")
            return self.findings
        tagged: list[Node] = []
        _unsafe_tags(root, tagged)
        for node in tagged[:20]:
            self.add(_line(node), f"YAML tag {node.tag!r} is not allowed (it would construct an object)",
                     "remove the tag; plan files hold plain strings, lists and mappings")
        if tagged:
            return self.findings
        if not isinstance(root, MappingNode):
            self.add(_line(root), "the top level must be a mapping", "start with schema_version: 1, backend: ..., tests: ...")
            return self.findings
        self._top(root)
        return self.findings

    def _top(self, root: MappingNode) -> None:
        top = _mapping(root)
        for key, (knode, _v) in top.items():
            if key not in TOP_KEYS:
                self.add(_line(knode), f"unknown key {key!r}", f"allowed keys: {', '.join(sorted(TOP_KEYS))}")
        sv = top.get("schema_version")
        if sv is None or _scalar(sv[1]) != "1":
            self.add(_line(sv[1]) if sv else 1, "schema_version must be 1", "set schema_version: 1")
        backend = top.get("backend")
        if backend is None or not _scalar(backend[1]):
            self.add(_line(backend[1]) if backend else 1, "backend is missing", "set backend: <name>, e.g. snpu")
        upstream_file = None
        up = top.get("upstream")
        if up is None or not isinstance(up[1], MappingNode):
            self.add(_line(up[1]) if up else 1, "upstream must be a mapping with file:", "e.g. upstream: {file: test/test_ops.py}")
        else:
            upstream_file = _scalar(_mapping(up[1]).get("file", (None, None))[1])
            if not upstream_file:
                self.add(_line(up[1]), "upstream.file is missing", "name the upstream test file, e.g. test/test_ops.py")
            elif self.root is not None:
                expected = plan_path_for(self.root, upstream_file)
                if expected != self.path.resolve():
                    self.add(_line(up[1]), f"upstream.file {upstream_file} belongs in {expected.relative_to(self.root.resolve())}",
                             "move the file there or fix upstream.file", "warning")
        defaults = top.get("defaults")
        if defaults is not None:
            if not isinstance(defaults[1], MappingNode):
                self.add(_line(defaults[1]), "defaults must be a mapping", "e.g. defaults: {mode: skip, reason: ...}")
            else:
                self._mode_reason(_mapping(defaults[1]), _line(defaults[1]), "defaults")
        tests = top.get("tests")
        if tests is None:
            self.add(1, "tests is missing", "add tests: [] or a list of entries")
            return
        if not isinstance(tests[1], SequenceNode):
            self.add(_line(tests[1]), "tests must be a list of entries", "write each entry as '- id: ...'")
            return
        self._entries(tests[1], upstream_file)

    def _mode_reason(self, m: dict[str, tuple[Node, Node]], line: int, what: str) -> None:
        mode = m.get("mode")
        if mode is None:
            self.add(line, f"{what} has no mode", f"add mode: one of {', '.join(MODES)}")
        elif _scalar(mode[1]) not in MODES:
            self.add(_line(mode[1]), f"{what}: unknown mode {_scalar(mode[1])!r}", f"use one of {', '.join(MODES)}")
        reason = m.get("reason")
        if reason is None or not (_scalar(reason[1]) or "").strip():
            self.add(_line(reason[1]) if reason else line, f"{what} has an empty reason",
                     "say why in a sentence (what a reviewer needs to agree)")

    def _entries(self, seq: SequenceNode, upstream_file: str | None) -> None:
        seen: dict[str, tuple[int, str]] = {}
        entries: list[tuple[int, str, str, str]] = []  # line, id, source, mode
        for item in seq.value:
            line = _line(item)
            if not isinstance(item, MappingNode):
                self.add(line, "entry is not a mapping", "write '- id: ...' with mode, reason, source on the lines below")
                continue
            m = _mapping(item)
            for key, (knode, _v) in m.items():
                if key not in ENTRY_KEYS:
                    self.add(_line(knode), f"unknown entry key {key!r}", f"allowed: {', '.join(sorted(ENTRY_KEYS))}")
            id_node = m.get("id")
            entry_id = _scalar(id_node[1]) if id_node else None
            if not entry_id:
                self.add(line, "entry has no id", "add id: Class::test_name (or a pattern)")
                continue
            what = f"entry {entry_id!r}"
            self._mode_reason(m, line, what)
            source = _scalar(m["source"][1]) if "source" in m else "rules"
            if source not in SOURCES:
                self.add(_line(m["source"][1]), f"{what}: unknown source {source!r}", f"use one of {', '.join(SOURCES)}")
                source = "rules"
            if "proposal" in m and _scalar(m["proposal"][1]) not in MODES:
                self.add(_line(m["proposal"][1]), f"{what}: proposal must be a mode", f"use one of {', '.join(MODES)}")
            if is_pattern(entry_id):
                try:
                    re.compile(entry_id)
                except re.error as exc:
                    self.add(line, f"{what}: not a valid pattern ({exc})", "escape regex characters such as . ( [ with \\")
                    continue
            if entry_id in seen:
                first_line, first_source = seen[entry_id]
                if first_source == source:
                    self.add(line, f"duplicate id {entry_id!r} (first at line {first_line})",
                             "keep one entry per id; merge their reasons")
                else:
                    lower, higher = sorted([(SOURCE_RANK[first_source], first_line, first_source),
                                            (SOURCE_RANK[source], line, source)])
                    # A bot entry under a logs or reviewer entry is the normal layering; a logs
                    # entry under a reviewer's is worth a look (the evidence disagrees with a person).
                    if lower[2] not in ("rules", "agent"):
                        self.add(lower[1], f"{what} ({lower[2]}) is shadowed by the {higher[2]} entry at line {higher[1]}",
                                 "delete the shadowed entry, or revisit the override given the evidence", "warning")
            else:
                seen[entry_id] = (line, source)
            entries.append((line, entry_id, source, _scalar(m["mode"][1]) if "mode" in m else ""))
        if self.inventory is not None and upstream_file:
            self._against_inventory(entries, upstream_file)

    def _never_effective(self, entries: list[tuple[int, str, str, str]], ids: list[str], upstream_file: str) -> None:
        if any(f.severity == "error" for f in self.findings):
            return
        effective = _effective_entries(self.path, ids)
        if effective is None:
            return
        for line, entry_id, source, _mode in entries:
            if source == "reviewer" and entry_id not in effective and (
                    entry_id in ids or (is_pattern(entry_id) and any(re.fullmatch(entry_id, i) for i in ids))):
                self.add(line, f"reviewer entry {entry_id!r} decides no test: other reviewer entries override every "
                         "test it matches", "delete it or narrow the entries that override it", "warning")

    def _against_inventory(self, entries: list[tuple[int, str, str, str]], upstream_file: str) -> None:
        assert self.inventory is not None
        ids = [t.relative_id for t in self.inventory.tests if t.file == upstream_file]
        id_set = set(ids)
        if not ids:
            self.add(1, f"the inventory has no tests of {upstream_file}", "regenerate the inventory, or delete this plan file",
                     "warning")
            return
        self._never_effective(entries, ids, upstream_file)
        for line, entry_id, _source, _mode in entries:
            if is_pattern(entry_id):
                rx = re.compile(entry_id)
                if not any(rx.fullmatch(i) for i in ids):
                    self.add(line, f"pattern {entry_id!r} matches no test in the inventory",
                             "fix the pattern (it is re.fullmatch over Class::method) or delete the entry")
            elif entry_id not in id_set:
                self.add(line, f"id {entry_id!r} is not in the inventory",
                         "the test was renamed or removed upstream; update or delete the entry")


def _effective_entries(path: Path, ids: list[str]) -> set[str] | None:
    """Ids of the entries that decide at least one test (via the contract's resolver)."""
    from crcr.contracts.plan import parse_plan_file

    try:
        pf = parse_plan_file(path.read_text(encoding="utf-8"), str(path))
    except Exception:  # already reported as a finding
        return None
    return {d.entry.id for d in (pf.resolve(i) for i in ids) if d.entry is not None}


def check_paths(paths: list[Path], inventory: Inventory | None = None) -> list[Finding]:
    """Check plan files or directories of them; findings sorted by file and line."""
    findings: list[Finding] = []
    for p in paths:
        if p.is_dir():
            files = sorted(f for f in p.rglob("*.yaml") if f.is_file())
            if not files:
                findings.append(Finding(str(p), 1, "no plan files (*.yaml) here", "run crcr select plan, or check the path"))
            for f in files:
                findings += _FileChecker(f, str(f), p, inventory).run()
        elif p.is_file():
            findings += _FileChecker(p, str(p), None, inventory).run()
        else:
            findings.append(Finding(str(p), 1, "no such file or directory", "pass a plan file or configs/selections/<backend>"))
    return findings
