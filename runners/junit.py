"""JUnit XML beside the results, in the shape pytest's own ``--junitxml`` writes.

failed -> <failure>, error -> <error>, skipped and xfailed -> <skipped> (xfailed with
type ``pytest.xfail``, as pytest does), passed, xpassed and flaky -> a plain testcase
(flaky carries a ``flaky`` property and its attempts), so every tool that reads
JUnit counts what pytest counted.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from crcr.contracts.results import RunResults
from crcr.fileio import atomic_write_bytes


def _classname(test_id: str) -> tuple[str, str]:
    parts = test_id.split("::")
    module = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    module = module.replace("/", ".")
    if len(parts) == 1:
        return module, parts[0]
    return ".".join([module, *parts[1:-1]]), parts[-1]


def to_xml(results: RunResults) -> bytes:
    counts = Counter(t.outcome for t in results.tests)
    total_time = sum(t.duration_s for t in results.tests)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites, "testsuite",
        name=f"crcr-{results.run.device}",
        tests=str(len(results.tests)),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"] + counts["xfailed"]),
        time=f"{total_time:.3f}",
        timestamp=results.run.started_at or "",
        hostname=results.run.host or "",
    )
    props = ET.SubElement(suite, "properties")
    for key in ("device", "torch_version", "torch_git", "plan_digest", "shard", "run_id"):
        value = getattr(results.run, key, None)
        if value:
            ET.SubElement(props, "property", name=key, value=str(value))
    for test in results.tests:
        classname, name = _classname(test.id)
        case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                             file=test.id.split("::", 1)[0], time=f"{test.duration_s:.3f}")
        message = test.message or ""
        first_line = message.splitlines()[0][:300] if message else ""
        if test.outcome == "failed":
            node = ET.SubElement(case, "failure", message=first_line, type=test.error_class or "AssertionError")
            node.text = message
        elif test.outcome == "error":
            node = ET.SubElement(case, "error", message=first_line, type=test.error_class or "Error")
            node.text = message
        elif test.outcome == "skipped":
            ET.SubElement(case, "skipped", type="pytest.skip", message=first_line)
        elif test.outcome == "xfailed":
            ET.SubElement(case, "skipped", type="pytest.xfail", message=first_line)
        elif test.outcome == "flaky":
            case_props = ET.SubElement(case, "properties")
            ET.SubElement(case_props, "property", name="flaky", value="true")
            ET.SubElement(case_props, "property", name="attempts", value=",".join(test.attempts))
        if test.repro and test.outcome in ("failed", "error"):
            out = ET.SubElement(case, "system-out")
            out.text = f"reproduce: {test.repro}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(results: RunResults, path: Path) -> None:
    atomic_write_bytes(path, to_xml(results))
