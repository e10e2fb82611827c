"""The allowlist: which downstream repositories receive dispatches, at which level.

CRCR's format (PyTorch's cross-repo CI relay) is read unchanged (``L1``..``L4``), with
CRCR's accepts and refusals (see docs/crcr-parity.md). crcr's optional
extensions live under a top-level ``crcr:`` key that CRCR ignores::

    crcr:
      untrusted_associations: [FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE]
      targets:
        org/repo:
          events: [pull_request, push, pull_request.closed]   # default: all forwarded events
          paths: ["torch/csrc/**", "aten/**"]                 # default: every change
          untrusted: true        # also dispatch PRs from untrusted authors
          kind: local            # run `command` instead of calling GitHub
          command: [crcr, downstream, --backend, snpu]
          timeout_s: 600

``load_allowlist`` parses and validates; ``AllowlistSource`` serves it from a file or
an https URL with a TTL cache, keeping the last good copy when a refresh fails; a
``https://github.com/<owner>/<repo>/blob/<ref>/<path>`` URL is read through GitHub's
contents API, as CRCR reads it.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from crcr.errors import ConfigError
from crcr.github.contents import ContentsError, parse_blob_url, read_blob_url
from relay.commands import CommandsConfig, parse_commands_config
from relay.trust import TrustConfig, parse_trust

log = logging.getLogger("crcr.relay.allowlist")

REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,99})/[A-Za-z0-9._-]{1,100}$")
DEVICE_RE = re.compile(r"^[^\s]{1,50}$")  # a label suffix: GitHub labels are at most 50 chars
LEVELS = ("L1", "L2", "L3", "L4")
DEFAULT_UNTRUSTED = ("FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE")
KNOWN_EVENTS = ("pull_request", "push")
TARGET_KEYS = {"events", "paths", "untrusted", "kind", "command", "timeout_s"}
CRCR_KEYS = {"targets", "untrusted_associations", "rerun", "trust", "commands"}
# re-run of a check run: CRCR re-runs the downstream workflow run through the Actions API
# ("upstream"); crcr's own way dispatches the upstream event again as a new delivery ("dispatch")
RERUN_MODES = ("dispatch", "upstream")


@dataclass(frozen=True)
class Target:
    """One downstream repository and everything crcr knows about sending to it."""

    repo: str
    level: int
    oncalls: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # L3 only: the ciflow/crcr/<device> labels that enable checks
    kind: str = "github"  # github | local
    command: tuple[str, ...] = ()
    timeout_s: float = 600.0
    events: tuple[str, ...] = ()  # empty: every forwarded event
    paths: tuple[str, ...] = ()  # empty: every change
    untrusted: bool = False

    def wants_event(self, event: str, action: str | None) -> bool:
        if not self.events:
            return True
        return event in self.events or (action is not None and f"{event}.{action}" in self.events)

    def wants_paths(self, changed: Iterable[str] | None) -> bool:
        """True when a changed path matches a filter; ``None`` (no file list known) passes."""
        if not self.paths or changed is None:
            return True
        return any(fnmatch.fnmatchcase(p, pat) for p in changed for pat in self.paths)


@dataclass(frozen=True)
class Allowlist:
    targets: dict[str, Target]
    # empty without a crcr: section: CRCR dispatches every author_association
    untrusted_associations: frozenset[str] = field(default_factory=frozenset)
    extensions: bool = False  # the crcr: section is present (crcr's own behaviours on)
    rerun: str = "upstream"  # see RERUN_MODES
    ignored_keys: tuple[str, ...] = ()  # top-level keys neither CRCR nor crcr reads (ignored, as CRCR does)
    trust: TrustConfig = field(default_factory=TrustConfig)  # gating off: a plain CRCR allowlist
    commands: CommandsConfig = field(default_factory=CommandsConfig)

    def level_of(self, repo: str) -> int | None:
        """The CRCR level (1..4) of ``repo``, or None when it is not allowlisted."""
        t = self.targets.get(repo)
        return t.level if t else None

    def devices(self) -> dict[str, list[str]]:
        """L3 device -> repos whose check runs that ``ciflow/crcr/<device>`` label enables."""
        out: dict[str, list[str]] = {}
        for t in self.targets.values():
            for d in t.devices:
                out.setdefault(d, []).append(t.repo)
        return {d: sorted(r) for d, r in sorted(out.items())}

    def oncalls(self, repo: str) -> tuple[str, ...]:
        t = self.targets.get(repo)
        return t.oncalls if t else ()

    def __iter__(self):
        return iter(sorted(self.targets.values(), key=lambda t: t.repo))

    def __len__(self) -> int:
        return len(self.targets)


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"allowlist {where}: {what}", hint="see docs/relay.md#allowlist for the format")


def _oncalls(value: Any, where: str) -> tuple[str, ...]:
    """Oncalls as CRCR reads them: a comma-separated string (any scalar is read as text) or a list."""
    if value is None or value == "" or value == []:
        return ()
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if v is not None and str(v).strip())
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return tuple(s.strip() for s in str(value).split(",") if s.strip())
    raise _bad(where, f"oncalls must be a comma-separated string or a list of names, got {type(value).__name__}")


def _check_repo(repo: Any, where: str) -> str:
    """``owner/repo``; surrounding blanks and slashes are dropped (``org/repo/`` is ``org/repo``), as CRCR does.

    CRCR then only asks for a ``/``; crcr also refuses names GitHub cannot have
    (``a/b/c``, spaces, ``..``), since the name becomes part of API URLs.
    """
    name = str(repo).strip().strip("/") if isinstance(repo, str | int | float) and not isinstance(repo, bool) else None
    if not name or "/" not in name:
        raise _bad(where, f"{repo!r} is not an owner/repo name")
    if not REPO_RE.match(name) or ".." in name:
        raise _bad(where, f"{repo!r} is not an owner/repo name GitHub allows")
    return name


def _entries(value: Any, level: str) -> list[tuple[str, tuple[str, ...]]]:
    """L1/L2/L4: a list of ``owner/repo`` or one-key ``owner/repo: oncalls`` mappings (as CRCR)."""
    if value is None or value == [] or value == {} or value == "":
        return []
    if not isinstance(value, list):
        raise _bad(level, f"must be a list of owner/repo entries, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        where = f"{level}[{i}]"
        if isinstance(item, str):
            out.append((_check_repo(item, where), ()))
        elif isinstance(item, dict):
            if len(item) != 1:
                raise _bad(where, "a mapping entry must have exactly one repo key (`owner/repo: oncall1, oncall2`)")
            ((repo, oncalls),) = item.items()
            out.append((_check_repo(repo, where), _oncalls(oncalls, f"{where} ({repo})")))
        else:
            raise _bad(where, f"must be `owner/repo` or `owner/repo: oncall1, oncall2`, got {type(item).__name__}")
    return out


def _l3(value: Any) -> list[tuple[str, tuple[str, ...], str]]:
    """L3: device -> {owner/repo: [oncalls]} (a repo mapping under each device, as CRCR)."""
    if value is None or value == {} or value == [] or value == "":
        return []
    if not isinstance(value, dict):
        raise _bad("L3", f"must be a mapping of device -> {{owner/repo: [oncalls]}}, got {type(value).__name__}")
    out = []
    for device_raw, repos in value.items():
        device = str(device_raw).strip()
        if not device:
            raise _bad("L3", "a device name must not be empty")
        if not DEVICE_RE.match(device):
            raise _bad(f"L3.{device}", "a device name is the <device> of a ciflow/crcr/<device> label (no blanks)")
        if not isinstance(repos, dict):
            raise _bad(f"L3.{device}", f"must be a repo mapping (`owner/repo: [oncalls]`), got {type(repos).__name__}")
        for repo, oncalls in repos.items():
            where = f"L3.{device}"
            out.append((_check_repo(repo, where), _oncalls(oncalls, f"{where}.{repo}"), device))
    return out


def _extension(repo: str, spec: Any) -> dict[str, Any]:
    where = f"crcr.targets.{repo}"
    if not isinstance(spec, dict):
        raise _bad(where, "expected a mapping of options")
    unknown = sorted(set(spec) - TARGET_KEYS)
    if unknown:
        raise _bad(where, f"unknown keys {unknown}; known: {sorted(TARGET_KEYS)}")
    out: dict[str, Any] = {}
    if "events" in spec:
        ev = spec["events"]
        if not isinstance(ev, list) or not all(isinstance(e, str) and e.split(".")[0] in KNOWN_EVENTS for e in ev):
            raise _bad(where, f"events must be a list of {list(KNOWN_EVENTS)} or `<event>.<action>`")
        out["events"] = tuple(ev)
    if "paths" in spec:
        ps = spec["paths"]
        if not isinstance(ps, list) or not all(isinstance(p, str) and p for p in ps):
            raise _bad(where, "paths must be a list of glob patterns")
        out["paths"] = tuple(ps)
    if "untrusted" in spec:
        if not isinstance(spec["untrusted"], bool):
            raise _bad(where, "untrusted must be true or false")
        out["untrusted"] = spec["untrusted"]
    kind = spec.get("kind", "github")
    if kind not in ("github", "local"):
        raise _bad(where, f"kind must be github or local, got {kind!r}")
    out["kind"] = kind
    if kind == "local":
        cmd = spec.get("command")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) and c for c in cmd):
            raise _bad(where, "a local target needs `command`: a non-empty list of arguments (never a shell string)")
        out["command"] = tuple(cmd)
    elif "command" in spec:
        raise _bad(where, "`command` is only for kind: local")
    if "timeout_s" in spec:
        t = spec["timeout_s"]
        if not isinstance(t, int | float) or isinstance(t, bool) or t <= 0:
            raise _bad(where, "timeout_s must be a positive number of seconds")
        out["timeout_s"] = float(t)
    return out


def parse_allowlist(data: Any, *, source: str = "allowlist") -> Allowlist:
    """Validate a loaded allowlist document; errors name the entry and what is wrong.

    Accepts and refuses what CRCR accepts and refuses: unknown top-level keys are
    ignored (listed in ``ignored_keys``), a repo may appear only once in the whole file
    (also under two L3 devices), ``org/repo/`` reads as ``org/repo``. The ``crcr:`` key
    switches on crcr's own behaviours (see docs/crcr-parity.md); without it the relay
    behaves as CRCR: every PR author is dispatched to (no trust gating).
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _bad(source, f"expected a mapping with keys L1..L4, got {type(data).__name__}")
    ignored = tuple(sorted(str(k) for k in data if k not in (*LEVELS, "crcr")))
    found: dict[str, dict[str, Any]] = {}

    def add(repo: str, level: int, oncalls: tuple[str, ...], device: str | None, where: str) -> None:
        if repo in found:
            prev = found[repo]
            raise _bad(where, f"duplicate repo {repo!r} (already at L{prev['level']}"
                              + (f" under device {prev['devices'][0]}" if prev["devices"] else "") + "); a repo appears once")
        found[repo] = {"repo": repo, "level": level, "oncalls": oncalls, "devices": (device,) if device else ()}

    for repo, oncalls in _entries(data.get("L1"), "L1"):
        add(repo, 1, oncalls, None, "L1")
    for repo, oncalls in _entries(data.get("L2"), "L2"):
        add(repo, 2, oncalls, None, "L2")
    for repo, oncalls, device in _l3(data.get("L3")):
        add(repo, 3, oncalls, device, f"L3.{device}")
    for repo, oncalls in _entries(data.get("L4"), "L4"):
        add(repo, 4, oncalls, None, "L4")

    extensions = "crcr" in data
    ext = data.get("crcr") or {}
    if not isinstance(ext, dict):
        raise _bad("crcr", "expected a mapping")
    unknown = sorted(set(ext) - CRCR_KEYS)
    if unknown:
        raise _bad("crcr", f"unknown keys {unknown}; known: {', '.join(sorted(CRCR_KEYS))}")
    # parity: a plain CRCR allowlist dispatches every author; the crcr: section turns gating on
    untrusted = ext.get("untrusted_associations", list(DEFAULT_UNTRUSTED)) if extensions else []
    if not isinstance(untrusted, list) or not all(isinstance(u, str) for u in untrusted):
        raise _bad("crcr.untrusted_associations", "expected a list of author_association values")
    rerun = ext.get("rerun", "dispatch")
    if rerun not in RERUN_MODES:
        raise _bad("crcr.rerun", f"expected one of {list(RERUN_MODES)}, got {rerun!r}")
    targets_ext = ext.get("targets") or {}
    if not isinstance(targets_ext, dict):
        raise _bad("crcr.targets", "expected a mapping of owner/repo -> options")
    for repo, spec in targets_ext.items():
        if repo not in found:
            raise _bad(f"crcr.targets.{repo}", "this repo is not in L1..L4; add it to a level first")
        found[repo].update(_extension(repo, spec))
    trust = parse_trust(ext.get("trust"), has_crcr_section=extensions,
                        legacy_untrusted=ext.get("untrusted_associations"))
    return Allowlist(
        targets={r: Target(**v) for r, v in found.items()},
        untrusted_associations=trust.untrusted_associations if trust.gating else frozenset(),
        extensions=extensions,
        rerun=rerun if extensions else "upstream",
        ignored_keys=ignored,
        trust=trust,
        commands=parse_commands_config(ext.get("commands"), set(found)),
    )


def parse_allowlist_text(text: str, *, source: str = "allowlist") -> Allowlist:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}", hint="fix the allowlist file") from exc
    return parse_allowlist(data, source=source)


def default_allowlist_path() -> Path:
    """configs/allowlist.yaml of this checkout (used when the relative default is not in the cwd)."""
    return Path(__file__).resolve().parent.parent / "configs" / "allowlist.yaml"


class AllowlistSource:
    """Serves the allowlist from a path or https URL, cached for ``ttl_s`` seconds.

    A refresh that fails (network, bad YAML, validation) keeps the last good copy and
    logs why; only the very first load raises.
    """

    def __init__(self, location: str, *, ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 http_timeout_s: float = 10.0, github_api_url: str = "https://api.github.com") -> None:
        self.location = location
        self.github_api_url = github_api_url
        self.ttl_s = ttl_s
        self.clock = clock
        self.http_timeout_s = http_timeout_s
        self._lock = threading.Lock()
        self._value: Allowlist | None = None
        self._loaded_at = 0.0
        self._mtime: float | None = None
        self._read_from: str | None = None

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("https://", "http://"))

    def _path(self) -> Path:
        p = Path(self.location)
        if not p.exists() and not p.is_absolute() and self.location == "configs/allowlist.yaml":
            p = default_allowlist_path()
        return p

    def _fetch(self) -> Allowlist:
        if self.is_url:
            if self.location.startswith("http://") and not self.location.startswith(("http://127.0.0.1", "http://localhost")):
                raise ConfigError(f"allowlist URL {self.location} is plain http", hint="use https (or a file path)")
            if parse_blob_url(self.location) is not None:  # what PyTorch configures: read as CRCR does
                try:
                    text = read_blob_url(self.location, api_url=self.github_api_url, timeout_s=self.http_timeout_s)
                except ContentsError as exc:
                    raise ConfigError(f"cannot fetch the allowlist from {self.location}: {exc}",
                                      hint="check CRCR_ALLOWLIST, CRCR_GITHUB_API_URL and the network") from exc
                return parse_allowlist_text(text, source=self.location)
            try:
                resp = httpx.get(self.location, timeout=self.http_timeout_s, follow_redirects=True)
                resp.raise_for_status()
            except httpx.HTTPError as exc:
                raise ConfigError(f"cannot fetch the allowlist from {self.location}: {exc}",
                                  hint="check CRCR_ALLOWLIST and the network") from exc
            return parse_allowlist_text(resp.text, source=self.location)
        path = self._path()
        try:
            text = path.read_text(encoding="utf-8")
            self._mtime = path.stat().st_mtime
            self._read_from = str(path)  # what the next checks stat (no path resolution per check)
        except OSError as exc:
            raise ConfigError(f"cannot read the allowlist {path}: {exc.strerror}",
                              hint="set CRCR_ALLOWLIST to a file or https URL") from exc
        return parse_allowlist_text(text, source=str(path))

    def _stale(self) -> bool:
        if self._value is None:
            return True
        if self.clock() - self._loaded_at >= self.ttl_s:
            return True
        if not self.is_url:  # a local edit is picked up at once
            try:
                return os.stat(self._read_from or self._path()).st_mtime != self._mtime
            except OSError:
                return False
        return False

    def current(self) -> Allowlist | None:
        """The cached allowlist while no refresh is due, else None (then ``get`` reads or fetches it)."""
        with self._lock:
            return None if self._stale() else self._value

    def get(self) -> Allowlist:
        """The current allowlist (refreshed when the TTL passed or the file changed)."""
        with self._lock:
            if not self._stale():
                assert self._value is not None
                return self._value
            try:
                self._value = self._fetch()
            except ConfigError as exc:
                if self._value is None:
                    raise
                log.warning("allowlist refresh failed, keeping the last good copy: %s", exc.message)
            self._loaded_at = self.clock()
            return self._value
