"""Does snpu behave like the CPU where upstream tests check behaviour, not just values?

Two checks over op_db (``benchmarks/snpu_conformance.py`` prints their counts):

- **errors**: every ``ErrorInput`` of an entry's ``error_inputs`` (built for the device, as
  upstream's ``test_errors`` builds them) runs on the CPU and on snpu. They *agree* when
  both raise the input's ``error_type`` with a message matching its ``error_regex`` (the
  template's ``assertRaisesRegex``); snpu raising its own ``SnpuUnsupportedOpError`` /
  ``SnpuDtypeError`` is a *refusal* (a capability limit, counted apart); anything else
  is a *disagreement*. An input the CPU itself does not satisfy is not snpu's to meet
  (``cpu-miss``), and one snpu cannot even build (a float64 tensor) is ``unbuilt``.
- **layout**: every float32 sample, and a copy of it whose input is channels-last (4-D
  and 5-D inputs) or transposed in memory (2-D and 3-D), runs on both; each output's
  memory format (contiguous, channels_last, channels_last_3d) must be the CPU's, and
  where the CPU's output is none of those, its strides (over dimensions longer than one)
  too, since tests assert ``is_contiguous(memory_format=...)`` and strides. A sample snpu
  fails is ``failed`` (values and failures are the coverage sweep's job); a relaid input
  the CPU itself refuses (a ``view`` of a transposed tensor) is ``cpu-error``.

Both reuse ``opinfo_sweep`` (its samples, device copies and sweep setup).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from runners.snpu.errors import SnpuDtypeError, SnpuUnsupportedOpError
from runners.snpu.opinfo_sweep import all_ops, opinfo_name, samples_for, sweeping, to_device

REFUSALS = (SnpuUnsupportedOpError, SnpuDtypeError)

# error verdicts, in report order
AGREE, REFUSED, DISAGREE, CPU_MISS, UNBUILT = "agree", "refused", "disagree", "cpu-miss", "unbuilt"
# layout verdicts
SAME, DIFFERENT, FAILED, CPU_ERROR = "same", "different", "failed", "cpu-error"


@dataclass
class Finding:
    """One checked input of one op_db entry: its verdict and, when it is not agreement, why."""

    op: str
    index: int
    verdict: str
    detail: str = ""
    sample: str = ""  # layout: the sample's number, with "/channels_last" or "/transposed" for a relaid copy


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.verdict] = out.get(f.verdict, 0) + 1
        return out

    def having(self, verdict: str) -> list[Finding]:
        return [f for f in self.findings if f.verdict == verdict]

    def failed_only_relaid(self) -> list[Finding]:
        """Layout: samples snpu runs as given but fails on a relaid copy (a kernel's layout bug)."""
        plain = {(f.op, f.sample): f.verdict for f in self.findings if "/" not in f.sample}
        return [
            f
            for f in self.having(FAILED)
            if "/" in f.sample and plain.get((f.op, f.sample.split("/")[0])) in (SAME, DIFFERENT)
        ]


def _raised(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except Exception as exc:  # the exception is the outcome being checked
        return exc
    return None


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no error"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:160]}"


def meets(exc: BaseException | None, error_type: Any, error_regex: str) -> bool:
    """Whether ``exc`` passes ``assertRaisesRegex(error_type, error_regex)``."""
    return isinstance(exc, error_type) and re.search(error_regex, str(exc)) is not None


def _error_inputs(op: Any, device: str) -> Iterator[Any]:
    """The entry's ErrorInputs built for ``device``, seeded as the template seeds them."""
    torch.manual_seed(0)
    yield from op.error_inputs_func(op, device)


def check_errors(op: Any) -> list[Finding]:
    """Every ErrorInput of ``op`` on the CPU and on snpu (see the module docstring)."""
    name = opinfo_name(op)
    if op.error_inputs_func is None:
        return []
    findings: list[Finding] = []
    cpu_inputs = _error_inputs(op, "cpu")
    dev_inputs = _error_inputs(op, "snpu")
    index = 0
    while True:
        try:
            cpu_ei = next(cpu_inputs, None)
        except Exception:  # an entry whose inputs cannot be built on the CPU has none to check
            break
        if cpu_ei is None:
            break
        try:
            dev_ei = next(dev_inputs, None)
        except REFUSALS as exc:
            findings.append(Finding(name, index, UNBUILT, _describe(exc)))
            break
        if dev_ei is None:
            break
        cpu_exc = _raised(lambda ei=cpu_ei: _call(op, ei))
        dev_exc = _raised(lambda ei=dev_ei: _call(op, ei))
        expect = f"expected {getattr(cpu_ei.error_type, '__name__', cpu_ei.error_type)} /{cpu_ei.error_regex}/"
        if not meets(cpu_exc, cpu_ei.error_type, cpu_ei.error_regex):
            verdict, detail = CPU_MISS, f"{expect}; cpu raised {_describe(cpu_exc)}"
        elif meets(dev_exc, dev_ei.error_type, dev_ei.error_regex):
            verdict, detail = AGREE, ""
        elif isinstance(dev_exc, REFUSALS):
            verdict, detail = REFUSED, _describe(dev_exc)
        else:
            verdict, detail = DISAGREE, f"{expect}; snpu raised {_describe(dev_exc)}"
        findings.append(Finding(name, index, verdict, detail))
        index += 1
    return findings


def _call(op: Any, ei: Any) -> Any:
    si = ei.sample_input
    return op(si.input, *si.args, **si.kwargs)


def layout(t: Any) -> tuple[Any, ...] | None:
    """What a test can observe of a tensor's layout: its memory formats, else its strides."""
    if not isinstance(t, torch.Tensor):
        return None
    formats = [t.is_contiguous()]
    if t.dim() == 4:
        formats.append(t.is_contiguous(memory_format=torch.channels_last))
    elif t.dim() == 5:
        formats.append(t.is_contiguous(memory_format=torch.channels_last_3d))
    if any(formats) or t.numel() <= 1:
        return tuple(formats)
    # dimensions of length one may carry any stride without changing what a test sees
    return (*formats, tuple(s for s, n in zip(t.stride(), t.shape, strict=True) if n > 1))


def _outputs(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _outputs(v)]
    return [x]


def relaid(sample: Any) -> tuple[str, Any] | None:
    """The sample with its input in another memory layout a test would use, or None.

    A 4-D / 5-D input goes channels-last (channels_last / channels_last_3d), a 2-D / 3-D
    one column-major in its last two dimensions (same shape, transposed strides): what
    CPU's kernels carry over to their outputs and tests check.
    """
    t = sample.input
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.numel() <= 1:
        return None
    if t.dim() in (4, 5):
        label = "channels_last"
        moved = t.detach().contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    elif t.dim() in (2, 3):
        label = "transposed"
        moved = t.detach().transpose(-2, -1).contiguous().transpose(-2, -1)
    else:
        return None
    copy = sample.transform(lambda x: x)
    copy.input = moved.requires_grad_(t.requires_grad)
    return label, copy


def _layout_variants(op: Any, dtype: torch.dtype, limit: int | None) -> Iterator[tuple[str, Any]]:
    for i, sample in enumerate(samples_for(op, dtype, limit)):
        yield f"{i}", sample
        other = relaid(sample)
        if other is not None:
            yield f"{i}/{other[0]}", other[1]


def check_layout(op: Any, dtype: torch.dtype = torch.float32, limit: int | None = None) -> list[Finding]:
    """Each sample's output layouts on the CPU and on snpu (see the module docstring)."""
    name = opinfo_name(op)
    if dtype not in op.supported_dtypes("cpu"):
        return []
    findings: list[Finding] = []
    variants = _layout_variants(op, dtype, limit)
    index = 0
    while True:
        try:
            item = next(variants, None)
        except Exception:  # a sample generator that cannot run is not a layout finding
            break
        if item is None:
            break
        label, sample = item
        verdict, detail = _compare_layout(op, sample)
        findings.append(Finding(name, index, verdict, f"sample {label} {detail}" if detail else "", label))
        index += 1
    return findings


def _compare_layout(op: Any, sample: Any) -> tuple[str, str]:
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception as exc:  # the CPU refuses this layout too: nothing to compare
        return CPU_ERROR, _describe(exc)
    try:
        dev = to_device(sample, "snpu")
        actual = op(dev.input, *dev.args, **dev.kwargs)
    except Exception as exc:  # a failing sample is the coverage sweep's finding
        return FAILED, _describe(exc)
    want = [layout(t) for t in _outputs(expected)]
    got = [layout(t) for t in _outputs(actual)]
    if want == got:
        return SAME, ""
    shapes = [tuple(t.shape) for t in _outputs(expected) if isinstance(t, torch.Tensor)]
    return DIFFERENT, f"{shapes}: cpu {want}, snpu {got}"


def run(
    check: Callable[[Any], list[Finding]],
    ops: list[Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """``check`` (``check_errors`` or ``check_layout``) over ``ops`` (default: all of op_db)."""
    report = Report()
    with sweeping():
        for op in all_ops() if ops is None else ops:
            if progress:
                progress(opinfo_name(op))
            report.findings.extend(check(op))
    return report


def ops_named(names: list[str]) -> list[Any]:
    """The op_db entries with these names (``name`` or ``name.variant``), in op_db's order."""
    wanted = set(names)
    with sweeping():
        return [op for op in all_ops() if opinfo_name(op) in wanted]
