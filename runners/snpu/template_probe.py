"""Template probes: what a family of upstream test templates characteristically does, run once per
(family, OpInfo entry, dtype) on snpu.

The capability sweep answers "do this op's samples match the CPU"; upstream templates check more:
out= semantics, noncontiguous inputs, Python-scalar operands, gradients, Python references in
strict refs mode, the dtypes an OpInfo claims. A probe runs the family's characteristic check on
the first few samples (``SAMPLE_LIMIT``) of one entry (``op_db`` or ``python_ref_db``) and reports
``None`` (passed) or ``"ErrorClass: first line"``. ``crcr select plan`` asks for the triples its
inventory needs and plans from the answers (``selector.rules.TemplateProbe``).

Run in a child process (a probe may crash or hang): ``python -m runners.snpu.template_probe IN OUT``
with IN a JSON list of ``[family, op, dtype]`` (dtype may be null: float32 is used); OUT gets a JSON line
``{"start": "family|op|dtype"}`` as each probe starts and ``{"key": "family|op|dtype", "answer": null | "error"}``
as it ends, so a child stopped early (the plan's probe budget, a crash) leaves the answers it finished, and a
child that died names the probe it died on.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

FAMILIES = (
    "samples",
    "noncontiguous",
    "out",
    "python_scalar",
    "python_ref",
    "ref_fallback",
    "grad",
    "variants",
    "dtypes",
    "unary_values",
    "unary_noncontiguous",
    "unary_variants",
    "unary_domain",
)
SAMPLE_LIMIT = 3
PROBE_SECONDS = 20


class ProbeMismatch(AssertionError):
    """The probe ran and the device did something the template would reject."""


def key(family: str, op: str, dtype: str | None) -> str:
    return f"{family}|{op}|{dtype or '-'}"


def _entries() -> dict[str, Any]:
    """OpInfo entries by name: ``op_db`` and ``python_ref_db`` first, then the other op_db-like lists
    of ``common_methods_invocations`` (``foreach_unary_op_db``... hold ``_foreach_add``), which
    templates also instantiate over; a name already found keeps its first entry."""
    import torch.testing._internal.common_methods_invocations as cmi
    from torch.testing._internal.opinfo.core import OpInfo

    from runners.snpu.opinfo_sweep import opinfo_name

    others = [
        value
        for name, value in sorted(vars(cmi).items())
        if name.endswith("_op_db") and name != "op_db" and isinstance(value, list | tuple)
    ]
    found: dict[str, Any] = {}
    for op in [*cmi.op_db, *cmi.python_ref_db, *(op for lst in others for op in lst)]:
        if isinstance(op, OpInfo):
            found.setdefault(opinfo_name(op), op)
    return found


def _samples(
    op: Any, device: str, dtype: Any, requires_grad: bool = False, reference: bool = False
) -> Iterator[Any]:
    import torch

    torch.manual_seed(0)
    gen = (
        op.reference_inputs(device, dtype, requires_grad=requires_grad)
        if reference
        else op.sample_inputs(device, dtype, requires_grad=requires_grad)
    )
    for i, sample in enumerate(gen):
        if i >= SAMPLE_LIMIT:
            return
        yield sample


def _call(op: Any, sample: Any, **extra: Any) -> Any:
    return op(sample.input, *sample.args, **sample.kwargs, **extra)


def _tensors(x: Any) -> list[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _same(actual: Any, expected: Any) -> None:
    import torch

    a, e = _tensors(actual), _tensors(expected)
    if len(a) != len(e):
        raise ProbeMismatch(f"{len(a)} outputs where {len(e)} were expected")
    for x, y in zip(a, e, strict=True):
        torch.testing.assert_close(
            x.cpu(),
            y.cpu(),
            equal_nan=True,
            check_device=False,
            check_stride=False,
            check_dtype=True,
            rtol=1.6e-2 if x.dtype == torch.bfloat16 else 1e-3,
            atol=1e-3,
        )


def _probe_samples(op: Any, device: str, dtype: Any) -> None:
    """The op's samples on the device against the same samples on the CPU (any dtype, refs too)."""
    from runners.snpu.opinfo_sweep import to_device

    ran = 0
    for sample in _samples(op, "cpu", dtype):
        expected = _call(op, sample)
        _same(_call(op, to_device(sample, device)), expected)
        ran += 1
    if ran == 0:
        raise ProbeMismatch("the entry has no samples at this dtype")


def _probe_noncontiguous(op: Any, device: str, dtype: Any) -> None:
    """test_noncontiguous_samples, contig-vs-strided templates: the same op on a noncontiguous copy."""
    import torch

    grad = dtype in op.supported_backward_dtypes(torch.device(device).type)
    for sample in _samples(op, device, dtype, requires_grad=grad):
        expected = _call(op, sample)
        actual = _call(op, sample.noncontiguous())
        _same(actual, expected)
        if grad:
            outs = [t for t in _tensors(actual) if t.requires_grad]
            if outs:
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])


def _probe_grad(op: Any, device: str, dtype: Any) -> None:
    """Gradient templates: forward with requires_grad and a backward through the first output (forward
    only at a dtype the OpInfo claims no backward for, as the templates do)."""
    import torch

    grad = dtype in op.supported_backward_dtypes(torch.device(device).type)
    for sample in _samples(op, device, dtype, requires_grad=grad):
        out = sample.output_process_fn_grad(_call(op, sample))
        outs = [t for t in _tensors(out) if t.requires_grad]
        if outs:
            outs[0].backward(torch.randn_like(outs[0]))


def _probe_variants(op: Any, device: str, dtype: Any) -> None:
    """Variant-consistency templates: method, in-place and operator variants against the function."""
    for sample in _samples(op, device, dtype):
        expected = _call(op, sample)
        single = _tensors(expected)
        for variant, inplace in (
            (op.method_variant, False),
            (op.operator_variant, False),
            (op.inplace_variant, True),
        ):
            if variant is None or (
                inplace
                and (
                    sample.broadcasts_input
                    or len(single) != 1
                    or single[0].dtype != _tensors(sample.input)[0].dtype
                )
            ):
                continue
            if variant is op.operator_variant and sample.kwargs:
                continue
            inp = sample.input.clone() if inplace and hasattr(sample.input, "clone") else sample.input
            _same(variant(inp, *sample.args, **sample.kwargs), expected)


def _probe_out(op: Any, device: str, dtype: Any) -> None:
    """test_out / test_out_warning: out= semantics as a backend must implement them."""
    import torch
    from torch.testing import make_tensor

    for sample in _samples(op, device, dtype):
        expected = _call(op, sample)
        out_call = partial(op, sample.input, *sample.args, **sample.kwargs)
        tensors = _tensors(expected)
        if not tensors:
            continue
        single = isinstance(expected, torch.Tensor)

        def shaped(fn: Callable[[Any], Any], tensors: list[Any] = tensors, single: bool = single) -> Any:
            made = [fn(t) for t in tensors]
            return made[0] if single else tuple(made)

        if not op.supports_out:
            accepted = True
            try:
                out_call(out=expected)
            except Exception:  # what the template expects of an op without out=
                accepted = False
            if accepted:
                raise ProbeMismatch("out= accepted although the OpInfo says the op does not support it")
            return
        out = shaped(
            lambda t: torch.full_like(t, float("nan")) if t.is_floating_point() else torch.zeros_like(t)
        )
        out_call(out=out)
        _same(out, expected)
        out = shaped(lambda t: make_tensor(t.shape, dtype=t.dtype, device=t.device, noncontiguous=True))
        out_call(out=out)
        _same(out, expected)
        out = shaped(lambda t: make_tensor((0,), dtype=t.dtype, device=t.device))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out_call(out=out)
        if any("An output with one or more elements" in str(w.message) for w in caught):
            raise ProbeMismatch("resizing an empty out= warned")
        if any(t.numel() > 0 for t in tensors):
            wrong = shaped(
                lambda t: make_tensor(
                    [*t.shape[:-1], t.shape[-1] + 1] if t.dim() else [2], dtype=t.dtype, device=t.device
                )
            )
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out_call(out=wrong)
            if not any("An output with one or more elements" in str(w.message) for w in caught):
                raise ProbeMismatch("resizing a non-empty out= did not warn")
        if device != "cpu" and not (op.is_factory_function and sample.kwargs.get("device") is None):
            with contextlib.suppress(RuntimeError):
                out_call(out=shaped(lambda t: make_tensor(t.shape, dtype=t.dtype, device="cpu")))
                raise ProbeMismatch("an out= on the CPU was accepted for device inputs")
        floats = any(t.dtype.is_floating_point or t.dtype.is_complex for t in tensors)
        if floats and not (op.is_factory_function and sample.kwargs.get("dtype") is None):
            with contextlib.suppress(RuntimeError):
                out_call(out=shaped(lambda t: make_tensor(t.shape, dtype=torch.long, device=t.device)))
                raise ProbeMismatch("an unsafe cast into a long out= was accepted")


def _probe_python_scalar(op: Any, device: str, dtype: Any) -> None:
    """Binary templates with a Python number as the other operand."""
    from torch.testing import make_tensor

    lhs_kw = getattr(op, "lhs_make_tensor_kwargs", {}) or {}
    rhs_kw = getattr(op, "rhs_make_tensor_kwargs", {}) or {}
    for shape in ((), (2,), (1, 2, 3)):
        lhs = make_tensor(shape, device=device, dtype=dtype, **lhs_kw)
        rhs = make_tensor((), device=device, dtype=dtype, **rhs_kw)
        actual, expected = op(lhs, rhs.item()), op(lhs, rhs)
        if actual.shape != expected.shape:
            raise ProbeMismatch(
                f"a Python scalar broadcasts to {tuple(actual.shape)}, a 0-d tensor to "
                f"{tuple(expected.shape)}"
            )


def _probe_refs(op: Any, device: str, dtype: Any, strict: bool) -> None:
    """test_python_ref(_torch_fallback): the reference on the device against the torch op there."""
    from torch._prims.context import TorchRefsMode

    if not hasattr(op, "torch_opinfo"):
        raise ProbeMismatch("not a Python reference entry")
    for sample in _samples(op, device, dtype, reference=True):
        ctx = TorchRefsMode(strict=True) if strict else contextlib.nullcontext()
        with ctx:
            ref = _call(op, sample)
        _same(ref, _call(op.torch_opinfo, sample))


def _probe_dtypes(op: Any, device: str, dtype: Any) -> None:
    """test_dtypes: the dtypes that work on the device (forward and backward) against the OpInfo's claim."""
    import torch
    from torch.testing._internal.common_dtype import all_types_and_complex_and, floating_and_complex_types_and

    device_type = torch.device(device).type
    extra = (torch.complex32,) if op.supports_dtype(torch.complex32, device_type) else ()
    backward_ok = floating_and_complex_types_and(torch.half, torch.bfloat16, *extra)
    fwd_ok, fwd_bad, bwd_ok, bwd_bad = set(), set(), set(), set()
    for dt in all_types_and_complex_and(torch.half, torch.bfloat16, torch.bool, *extra):
        rg = dt in backward_ok
        try:
            samples = list(_samples(op, device, dt, requires_grad=rg))
        except Exception:
            fwd_bad.add(dt)
            if rg:
                bwd_bad.add(dt)
            continue
        for sample in samples:
            try:
                result = _call(op, sample)
                fwd_ok.add(dt)
            except Exception:
                fwd_bad.add(dt)
                if rg:
                    bwd_bad.add(dt)
                continue
            if not any(t.requires_grad for t in _tensors([sample.input, *sample.args])):
                continue
            try:
                outs = _tensors(sample.output_process_fn_grad(result))
                if outs:
                    outs[0].backward(torch.randn_like(outs[0]))
                    bwd_ok.add(dt)
            except Exception:
                bwd_bad.add(dt)
    claimed_f = set(op.supported_dtypes(device_type))
    claimed_b = set(op.supported_backward_dtypes(device_type))
    unclaimed = ((fwd_ok - fwd_bad) - claimed_f) | ((bwd_ok - bwd_bad) - claimed_b)
    missing = (claimed_f & (fwd_bad - fwd_ok)) | (claimed_b & (bwd_bad - bwd_ok))
    if hasattr(op, "torch_opinfo"):
        unclaimed = set()  # references may support more dtypes than claimed
    if unclaimed or missing:
        names = lambda s: ", ".join(sorted(str(d).removeprefix("torch.") for d in s))  # noqa: E731
        raise ProbeMismatch(
            "; ".join(
                x
                for x in (
                    f"claimed but failing on {device}: {names(missing)}" if missing else "",
                    f"working but not claimed: {names(unclaimed)}" if unclaimed else "",
                )
                if x
            )
        )


def _unary_tensor(op: Any, device: str, dtype: Any, shape: tuple[int, ...]) -> Any:
    from torch.testing import make_tensor

    low, high = getattr(op, "domain", (None, None)) or (None, None)
    return make_tensor(shape, device=device, dtype=dtype, low=low, high=high)


def _probe_unary_values(op: Any, device: str, dtype: Any) -> None:
    """Templates over unary_ufuncs comparing values (reference numerics): ``op(t)`` with a lone tensor of
    ordinary and extremal values on the device against the CPU."""
    import torch

    t = _unary_tensor(op, "cpu", dtype, (64,))
    if dtype.is_floating_point and getattr(op, "handles_extremals", True):
        t[:3] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=dtype)
    _same(op(t.to(device)), op(t))


def _probe_unary_noncontiguous(op: Any, device: str, dtype: Any) -> None:
    """Templates over unary_ufuncs on strided views: ``op(t[::2])`` against ``op(t)[::2]``, transposed too."""
    t = _unary_tensor(op, device, dtype, (26, 10))
    _same(op(t[::2]), op(t)[::2])
    _same(op(t.T), op(t).T)
    _same(op(t.clone().expand(2, -1, -1))[1], op(t))


def _probe_unary_variants(op: Any, device: str, dtype: Any) -> None:
    """test_variant_consistency over unary_ufuncs: function, method, in-place and a TorchScript wrapper."""
    import torch

    t = _unary_tensor(op, device, dtype, (5, 5))
    expected = op(t)

    def _fn(t: Any) -> Any:
        return op(t)

    for alt, inplace in ((op.get_method(), False), (op.get_inplace(), True), (torch.jit.script(_fn), False)):
        if alt is None:
            continue
        if inplace and not torch.can_cast(expected.dtype, dtype):
            with contextlib.suppress(RuntimeError):
                alt(t.clone())
                raise ProbeMismatch("an in-place variant that changes the dtype did not raise")
            continue
        _same(alt(t.clone()), expected)


def _probe_unary_domain(op: Any, device: str, dtype: Any) -> None:
    """test_float_domains: just outside the OpInfo's domain the op gives NaN on the device."""
    import math

    import torch

    low, high = op.domain
    for edge, sign in ((low, -1), (high, 1)):
        if edge is None:
            continue
        x = torch.tensor(edge, device=device, dtype=dtype) + sign * 0.1
        if x.item() == edge:
            continue
        value = op(x).item()
        if not math.isnan(value):
            raise ProbeMismatch(f"{x.item()} outside the domain gave {value}, not nan")


def _probe_attrs(op: Any, names: str) -> None:
    """The OpInfo attributes a template reads (``op.<name>`` in its source) exist on this torch's entry."""
    missing = [n for n in names.split(",") if n and not hasattr(op, n)]
    if missing:
        raise ProbeMismatch(
            f"the template reads op.{', op.'.join(missing)}, which this torch's "
            f"{type(op).__name__} does not have"
        )


PROBES: dict[str, Callable[[Any, str, Any], None]] = {
    "unary_values": _probe_unary_values,
    "unary_noncontiguous": _probe_unary_noncontiguous,
    "unary_variants": _probe_unary_variants,
    "unary_domain": _probe_unary_domain,
    "samples": _probe_samples,
    "noncontiguous": _probe_noncontiguous,
    "out": _probe_out,
    "python_scalar": _probe_python_scalar,
    "python_ref": partial(_probe_refs, strict=True),
    "ref_fallback": partial(_probe_refs, strict=False),
    "grad": _probe_grad,
    "variants": _probe_variants,
    "dtypes": _probe_dtypes,
}


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout(f"the probe ran longer than {PROBE_SECONDS} s")


def device_key() -> str:
    """torch's version and every snpu source file but this one (whose families have their own digests) and
    the testing hook (how upstream test classes find the device, not what the device does)."""
    import hashlib
    from pathlib import Path

    import torch

    here = Path(__file__).resolve()
    h = hashlib.sha256(torch.__version__.encode())
    for path in sorted(here.parent.rglob("*.py")):
        if path not in (here, here.parent / "testing_hook.py"):  # test-harness glue, not device behaviour
            h.update(path.relative_to(here.parent).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def family_digest(family: str) -> str:
    """A digest of the family's probe code: a cached answer is reused only while its probe is unchanged."""
    import hashlib
    import inspect

    fn = PROBES[family] if family != "attrs" else _probe_attrs
    fn = getattr(fn, "func", fn)
    text = inspect.getsource(fn) + inspect.getsource(_samples) + inspect.getsource(_same) + str(SAMPLE_LIMIT)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def run_probes(
    requests: list[tuple[str, str, str | None]],
    device: str = "snpu",
    progress: Callable[[int], None] | None = None,
    answered: Callable[[str, str | None], None] | None = None,
    started: Callable[[str], None] | None = None,
) -> dict[str, str | None]:
    """Run each ``(family, op, dtype)`` probe on ``device``; ``None`` means it passed. ``started`` is called with
    each probe's key as it starts, ``answered`` with each answer as soon as it is known."""
    import torch

    from runners.snpu import install
    from runners.snpu.opinfo_sweep import _no_fallback
    from runners.testfn import fast_test_fn_lookup

    if device != "cpu":
        install()
    entries = _entries()
    results: dict[str, str | None] = {}
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        signal.signal(signal.SIGALRM, _alarm)
    with _no_fallback(), fast_test_fn_lookup(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for family, name, dname in requests:
            k = key(family, name, dname)
            if k in results:
                continue
            op = entries.get(name)
            if op is None or (family not in PROBES and family != "attrs"):
                results[k] = f"Unknown: no OpInfo entry {name!r} or probe family {family!r} in this torch"
                if answered:
                    answered(k, results[k])
                continue
            dtype = getattr(torch, dname or "float32", None)
            if started:
                started(k)
            if use_alarm:
                signal.alarm(PROBE_SECONDS)
            try:
                if family == "attrs":  # the dtype slot carries the attribute names
                    _probe_attrs(op, dname or "")
                else:
                    PROBES[family](op, device, dtype)
                results[k] = None
            except BaseException as exc:  # every failure is the probe's answer, never the probe run's
                if isinstance(exc, KeyboardInterrupt):
                    raise
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                results[k] = f"{type(exc).__name__}: {first}"
            finally:
                if use_alarm:
                    signal.alarm(0)
            if answered:
                answered(k, results[k])
            if progress:
                progress(1)
    return results


def main(argv: list[str]) -> int:
    src, dst = argv[1], argv[2]
    device = argv[3] if len(argv) > 3 else "snpu"
    with open(src, encoding="utf-8") as f:
        requests = [tuple(r) for r in json.load(f)]
    with open(dst, "w", encoding="utf-8") as f:

        def write(line: dict[str, Any]) -> None:
            f.write(json.dumps(line) + "\n")
            f.flush()

        run_probes(
            requests,  # type: ignore[arg-type]
            device,
            answered=lambda k, answer: write({"key": k, "answer": answer}),
            started=lambda k: write({"start": k}),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
