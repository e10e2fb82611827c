"""The report a person acts on: Markdown, and CRCR's triage-verdict JSON (schema v1).

The verdict is built from the analysis, validated against
``crcr.contracts.callback.TriageVerdict``, capped at 16 KB (excerpts shrink first) and
10 evidence items. Everything quoted from runs (log excerpts, test ids, commit titles)
is untrusted: it is fenced or escaped so it cannot turn into Markdown structure, links
or mentions, and secrets are scrubbed.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

from crcr.contracts.callback import TriageVerdict
from crcr.contracts.results import scrub
from crcr.errors import ContractError
from triage.classify import Analysis, Finding
from triage.signals import Obs

ANALYZER_NAME = "crcr-triage"
ANALYZER_VERSION = "1"
MAX_VERDICT_BYTES = 16 * 1024
MAX_EVIDENCE = 10
ACTION_TEXT = {
    "revert": "Revert the upstream PR",
    "forward_fix": "Ask upstream for a forward fix",
    "skip_in_plan": "Skip the failing tests in the backend's plan",
    "ignore_flake": "Ignore as a flake",
    "infra_ticket": "Open an infra ticket for the backend's runners",
    "bisect": "Bisect: run the planned reruns before blaming a commit",
    "wait": "Wait for the runs already in flight",
    "none": "Nothing to do",
}


@dataclass
class EvidenceItem:
    sha: str
    job: str
    test: str
    outcome: str
    attempt: int
    excerpt: str
    log_url: str | None


def _https(url: str | None) -> str | None:
    return url if isinstance(url, str) and url.startswith("https://") and len(url) <= 2000 else None


def _item(obs: Obs, test: str) -> EvidenceItem:
    return EvidenceItem(sha=obs.run.sha, job=obs.run.job, test=test, outcome=obs.status, attempt=obs.run.attempt,
                        excerpt=scrub(obs.excerpt or obs.reason, 1000) or "", log_url=_https(obs.run.url))


def evidence(analysis: Analysis) -> list[EvidenceItem]:
    """The runs behind the call, most telling first: failures at the first bad commit, the
    last good pass, reproductions; infra failures; flaky commits."""
    items: list[EvidenceItem] = []
    def add_finding(f: Finding) -> None:
        s = f.signal
        if f.first_bad is not None:
            for o in s.observations(f.first_bad, "fail")[:2]:
                items.append(_item(o, s.key))
        if f.last_good is not None:
            for o in s.observations(f.last_good, "pass")[:1]:
                items.append(_item(o, s.key))
        if f.kind == "flaky":
            for pos in sorted(s.points):
                for o in s.points[pos]:
                    if o.status in ("fail", "flake"):
                        items.append(_item(o, s.key))

    for f in analysis.findings:
        add_finding(f)
    if analysis.kind == "infra" or not items:
        items += [_item(o, "") for o in analysis.infra[:MAX_EVIDENCE]]
    else:  # why the commits of an untested range have no usable result
        gap = {c.sha for c in analysis.gap}
        items += [_item(o, "") for o in analysis.infra if o.run.sha in gap][:3]
    for o in analysis.missing_baselines[:2]:
        items.append(_item(o, ""))
    seen: set[tuple[str, str, str, int, str]] = set()
    unique = []
    for it in items:
        key = (it.sha, it.job, it.test, it.attempt, it.outcome)
        if key not in seen:
            seen.add(key)
            unique.append(it)
    return unique


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def verdict(analysis: Analysis, *, analyzed_at: str | None = None, model: str = "", prompt_version: str = "") -> dict[str, Any]:
    """CRCR's triage verdict (schema v1) for ``analysis``: validated, <= 16 KB, <= 10 evidence."""
    suspected = None
    if analysis.suspect is not None and analysis.category == "upstream":
        reason = {"revert": "first failing commit right after a passing one, confirmed",
                  "forward_fix": "first failing commit; confirm with the author",
                  "none": "broke here, recovered since",
                  "bisect": "first failing commit, not yet reproduced"}.get(analysis.action, analysis.action)
        suspected = {"pr": analysis.suspect.pr, "commit": analysis.suspect.sha, "reason": reason[:300]}
    elif analysis.gap and analysis.first_bad is not None and analysis.last_good is not None:
        suspected = {"pr": None, "commit": None,
                     "reason": f"a commit after {analysis.last_good.sha[:12]} up to {analysis.first_bad.sha[:12]} "
                               f"({len(analysis.gap) + 1} commits); bisecting"[:300]}
    items = evidence(analysis)[:MAX_EVIDENCE]
    body: dict[str, Any] = {
        "schema_version": 1,
        "category": analysis.category,
        "confidence": analysis.confidence,
        "summary": (scrub(analysis.summary, 1000) or "")[:1000],
        "suspected_upstream": suspected,
        "evidence": [{"job": it.job[:300], "test": it.test[:500], "log_url": it.log_url,
                      "excerpt": f"[{it.outcome} at {it.sha[:12]}, attempt {it.attempt}] {it.excerpt}"[:1000]}
                     for it in items],
        "reproduced_on_retry": bool(analysis.reproduced),
        "analyzer": {"name": ANALYZER_NAME, "version": ANALYZER_VERSION, "model": model,
                     "prompt_version": prompt_version},
        "analyzed_at": analyzed_at or _now(),
    }
    limit = 1000
    while len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_VERDICT_BYTES:
        limit //= 2
        if limit < 40:
            body["evidence"] = body["evidence"][: max(0, len(body["evidence"]) - 1)]
            limit = 40
        for e in body["evidence"]:
            e["excerpt"] = e["excerpt"][:limit]
    try:
        return TriageVerdict.model_validate(body).model_dump(mode="json")
    except Exception as exc:  # a bug here must not post half a verdict
        raise ContractError(f"the triage verdict does not match schema v1: {exc}") from exc


# --- Markdown ---------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")


def md_text(text: str, limit: int = 300) -> str:
    """Untrusted text as inert inline Markdown (no links, mentions, HTML or table breaks)."""
    text = (scrub(text, limit) or "").replace("\r", " ").replace("\n", " ")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("@", "@\u200b")  # no @mentions from quoted text


def md_block(text: str, limit: int = 1000) -> str:
    """Untrusted text in a fenced block whose fence no backtick run inside can close."""
    text = scrub(text, limit) or ""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _commit_link(repo: str, sha: str) -> str:
    return f"[`{sha[:12]}`](https://github.com/{repo}/commit/{sha})" if re.fullmatch(r"[0-9a-f]{7,64}", sha) \
        else f"`{md_text(sha, 64)}`"


def _pr_link(repo: str, pr: int | None) -> str:
    return f"[#{pr}](https://github.com/{repo}/pull/{pr})" if pr else "unknown PR"


def markdown(analysis: Analysis, verdict_json: dict[str, Any], *, upstream_repo: str = "pytorch/pytorch") -> str:
    a = analysis
    out = [f"# crcr triage: {md_text(a.backend, 200)}", ""]
    out += ["## Summary", "", md_text(a.summary, 1000), ""]
    out += [f"**Recommended action:** {ACTION_TEXT.get(a.action, a.action)}  ",
            f"**Category:** {a.category} ({a.kind.replace('_', ' ')})  ",
            f"**Confidence:** {a.confidence}", ""]
    if a.action == "revert":
        out += ["crcr never reverts by itself: a person decides, from the evidence below.", ""]
    if a.suspect is not None or a.gap:
        out += ["## Suspect", ""]
        if a.suspect is not None:
            out.append(f"- Commit {_commit_link(upstream_repo, a.suspect.sha)}, PR {_pr_link(upstream_repo, a.suspect.pr)}"
                       + (f": {md_text(a.suspect.title, 200)}" if a.suspect.title else ""))
        if a.last_good is not None:
            out.append(f"- Last good: {_commit_link(upstream_repo, a.last_good.sha)}")
        if a.first_bad is not None:
            out.append(f"- First bad: {_commit_link(upstream_repo, a.first_bad.sha)}")
        if a.gap:
            out.append(f"- Untested between them ({len(a.gap)}): "
                       + ", ".join(f"{_commit_link(upstream_repo, c.sha)} ({_pr_link(upstream_repo, c.pr)})"
                                   for c in a.gap[:20]) + (" ..." if len(a.gap) > 20 else ""))
        out.append(f"- Reproduced on a rerun: {'yes' if a.reproduced else 'no'}; sandwiched between passing runs: "
                   f"{'yes' if a.sandwiched else 'no'}")
        out.append("")
    failing = a.failing_tests
    if failing:
        out += ["## Failing tests", "", "| test | first failing commit |", "|---|---|"]
        for test, sha in sorted(failing.items())[:100]:
            out.append(f"| {md_text(test, 300)} | {_commit_link(upstream_repo, sha)} |")
        if len(failing) > 100:
            out.append(f"| ... {len(failing) - 100} more | |")
        out.append("")
    items = evidence(a)
    if items:
        out += ["## Evidence", "", "| commit | job | attempt | test | outcome | log |", "|---|---|---|---|---|---|"]
        for it in items[:30]:
            log = f"[log]({it.log_url})" if it.log_url else ""
            out.append(f"| {_commit_link(upstream_repo, it.sha)} | {md_text(it.job, 100)} | {it.attempt} | "
                       f"{md_text(it.test, 200)} | {it.outcome} | {log} |")
        out.append("")
        excerpts = [it for it in items if it.excerpt][:5]
        if excerpts:
            out += ["## Log excerpts", ""]
            for it in excerpts:
                out += [f"{it.outcome} at {_commit_link(upstream_repo, it.sha)}, {md_text(it.job, 100)}"
                        + (f", {md_text(it.test, 200)}" if it.test else "") + ":", "", md_block(it.excerpt, 800), ""]
    out += ["## Retried", ""]
    if a.retried:
        out += [f"- {md_text(r, 300)}" for r in a.retried]
    if a.reruns:
        out += [f"- planned: a rerun at {_commit_link(upstream_repo, r.sha)} ({md_text(r.reason, 200)}); "
                "`crcr triage analyze --request-reruns` or the relay, after a failed trunk job, asks for it"
                for r in a.reruns]
    if not a.retried and not a.reruns:
        out.append("- nothing")
    out.append("")
    if a.others:
        out += ["## Other signals", ""]
        for f in a.others[:20]:
            out.append(f"- {md_text(f.signal.key, 200)}: {f.kind.replace('_', ' ')}"
                       + (f" ({md_text(f.why, 200)})" if f.why else ""))
        out.append("")
    if a.advisor:
        adv = a.advisor
        out += ["## Advisor", "",
                f"{md_text(str(adv.get('name', '')), 60)} says **{md_text(str(adv.get('verdict', '')), 20)}** "
                f"(confidence {md_text(str(adv.get('confidence', '')), 10)}): {md_text(str(adv.get('summary', '')), 500)}",
                "", "The advisor can raise or lower confidence; it cannot create a revert recommendation.", ""]
    if a.notes:
        out += ["## Notes", ""] + [f"- {md_text(n, 400)}" for n in a.notes] + [""]
    out += ["<details><summary>Triage verdict (CRCR schema v1)</summary>", "",
            md_block(json.dumps(verdict_json, indent=1), 16_500), "", "</details>", ""]
    return "\n".join(out)
