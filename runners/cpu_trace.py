"""The CPU trace: run the CPU twin of upstream device tests once and record the aten ops their device
tensors go through.

A plain device test (no OpInfo) is instantiated for every device type: ``TestFooPRIVATEUSE1.test_x_snpu_float32``
has a CPU twin ``TestFooCPU.test_x_cpu_float32`` running the same generic body with ``device="cpu"``. The trace
runs that twin under two recording modes and writes down what the body really did, helpers, local functions and
backward passes included, which a static reading of the body cannot follow:

* a ``TorchFunctionMode`` tags the tensors that would live on the device: the results of a factory or a
  ``.to(...)`` called with the test's device argument (a ``str`` subclass equal to ``"cpu"``, so a literal
  ``"cpu"`` or a tensor built without a device stays on the host), or with a ``torch.device`` of the CPU (only
  in a test that receives the device argument: ``torch.device("cpu")`` in a test without one stays on the host);
* a ``TorchDispatchMode`` (below autograd, after CompositeImplicitAutograd decomposition, backward ops too)
  records each aten overload called on a tagged tensor (one that raised too: it reached its kernel), with the
  dtypes and layouts of the tagged tensors and
  the largest tagged numel, and tags the outputs of every op with a tagged input (``.cpu()`` or ``.to("cpu")`` of a
  tagged tensor gives an untagged alias: on the device it is a copy to the host). Assertions (``assertEqual``) are not
  recorded: they compare, they are not the test's device work.

The twin's outcome is recorded too: passed, failed (first error line), skipped, timed out (``TRACE_SECONDS``),
or no twin (no such CPU test, e.g. different ``@dtypesIfCPU``). A twin that fails under the recording modes
but passes without them is reported as ``trace_broke``, not as a CPU failure.

Run in a child process (a test may crash or hang): ``python -m runners.cpu_trace IN OUT`` with IN a JSON object
``{"root": CHECKOUT, "file": "test/test_x.py", "tests": [[id, cls, method, device], ...]}``; OUT gets one JSON
line per test as it starts (``{"start": id}``) and as it ends (a ``crcr.contracts.cputrace.CpuTrace``: outcome,
error, twin, and the ops in call order), so a crash loses only the test that was running.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from crcr.contracts.cputrace import CpuTrace, TraceOp
from crcr.contracts.inventory import generic_class
from runners.testfn import fast_test_fn_lookup

TRACE_SECONDS = int(os.environ.get("CRCR_TRACE_SECONDS") or 30)  # per test


class _Device(str):
    """The CPU twin's device argument: equal to ``"cpu"`` everywhere, but recognisable by identity of type."""

    __slots__ = ()


DEVICE = _Device("cpu")


def code_digest() -> str:
    """A digest of this file: cached traces are reused only while the recording code is unchanged."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def twin(method: str, device: str) -> str | None:
    """``test_x_snpu_float32`` -> ``test_x_cpu_float32`` (the last ``_<device>`` is the device suffix)."""
    marker = f"_{device}"
    at = method.rfind(marker)
    if at < 0 or not (at + len(marker) == len(method) or method[at + len(marker)] == "_"):
        return None
    return method[:at] + "_cpu" + method[at + len(marker) :]


def twin_class(cls: str, device: str | None = None) -> str | None:
    """``TestFooPRIVATEUSE1`` (or ``TestFooSNPU``, as a file's later classes are named for ``device`` snpu) ->
    ``TestFooCPU``; None for a class that is not device-instantiated."""
    base = generic_class(cls, device)
    return None if base is None or cls.endswith("CPU") else base + "CPU"


class OpLog:
    """The aten ops a test's device tensors went through, one entry per overload in the order first called: their
    dtypes and layouts, the largest numel and the longest softmax / norm row. Both traces keep one (the CPU twin's
    recorder, snpu's shadow mode), so both write the same ``TraceOp`` records."""

    def __init__(self) -> None:
        self.ops: dict[str, dict[str, Any]] = {}

    def record(self, name: str, tensors: list[Any], row: int = 0, dtypes: tuple[Any, ...] = ()) -> None:
        full = name if "::" in name else f"aten::{name}"
        entry = self.ops.setdefault(full, {"dtypes": set(), "layouts": set(), "numel": 0, "row": 0})
        entry["row"] = max(entry["row"], row)
        for dtype in dtypes:
            entry["dtypes"].add(str(dtype).removeprefix("torch."))
        for t in tensors:
            entry["dtypes"].add(str(t.dtype).removeprefix("torch."))
            entry["layouts"].add(str(t.layout).removeprefix("torch."))
            with contextlib.suppress(Exception):  # a tensor without storage (meta, sparse in construction)
                entry["numel"] = max(entry["numel"], int(t.numel()))

    def result(self) -> list[dict[str, Any]]:
        """One entry per aten overload, in the order the test first called it."""
        return [
            {"op": name, "dtypes": sorted(e["dtypes"]), "layouts": sorted(e["layouts"]), "numel": e["numel"],
             **({"row": e["row"]} if e["row"] else {})}
            for name, e in self.ops.items()
        ]


class _Recorder(OpLog):
    def __init__(self) -> None:
        import torch.utils.weak

        super().__init__()
        self.tagged: Any = torch.utils.weak.WeakIdKeyDictionary()
        self.factory = 0  # > 0 inside a call made with the device argument
        self.quiet = 0  # > 0 inside an assertion
        # a torch.device of the CPU stands for the test's device only in a test that receives the device argument
        # (``torch.device(device)``); a test without one that builds ``torch.device("cpu")`` stays on the host
        self.cpu_device_objects = True

    def is_device(self, value: Any) -> bool:
        import torch

        return isinstance(value, _Device) or (
            self.cpu_device_objects and isinstance(value, torch.device) and value.type == "cpu"
        )

    def tag(self, value: Any) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        for t in tree_leaves(value):
            if isinstance(t, torch.Tensor):
                self.tagged[t] = True

    def has_tag(self, t: Any) -> bool:
        return t in self.tagged



def row_length(name: str, args: tuple[Any, ...]) -> int:
    """The row a softmax or layer-norm kernel reduces over (what a device that cannot split such a row must hold
    at once, snpu's ``limits.max_softmax_norm_row_elements``): ``native_layer_norm``'s normalized shape,
    ``_softmax``'s dimension; 0 for any other op (snpu's group norm does not plan by rows)."""
    import math

    base = name.split("::")[-1].split(".")[0]
    try:
        if base in ("native_layer_norm", "native_layer_norm_backward"):
            shape = args[1] if base == "native_layer_norm" else args[2]
            return int(math.prod(shape))
        if base in ("_softmax", "_log_softmax", "_safe_softmax", "_softmax_backward_data", "_log_softmax_backward_data"):
            tensor, dim = args[0], args[2] if "backward" in base else args[1]
            return int(tensor.size(dim)) if tensor.dim() else 1
    except (IndexError, TypeError, ValueError, RuntimeError):
        return 0
    return 0


def _host_string(value: Any) -> bool:
    """A literal ``"cpu"`` (``t.to("cpu")``), not the twin's device argument: on the device, a copy to the host."""
    return isinstance(value, str) and not isinstance(value, _Device) and value.split(":")[0] == "cpu"


def _modes(rec: _Recorder) -> tuple[Any, Any]:
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            to_device = rec.is_device(kwargs.get("device")) or (
                name == "to" and any(rec.is_device(a) for a in args[1:2])
            )
            to_host = name == "cpu" or (
                name == "to" and any(_host_string(a) for a in (*args[1:2], kwargs.get("device")))
            )
            if to_host and args and isinstance(args[0], torch.Tensor) and rec.has_tag(args[0]):
                out = func(*args, **kwargs)
                if out is args[0]:  # on the device: a copy to the host, untagged
                    rec.quiet += 1
                    try:
                        out = args[0].view_as(args[0])
                    finally:
                        rec.quiet -= 1
                return out
            if not to_device:
                return func(*args, **kwargs)
            rec.factory += 1
            try:
                out = func(*args, **kwargs)
            finally:
                rec.factory -= 1
            rec.tag(out)
            return out

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except Exception:
                # an op that raises inside its kernel (an argument check the test catches) still reached the
                # kernel: the device needs one too, or it raises its own NotImplementedError instead
                ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and rec.has_tag(t)]
                if not rec.quiet and (ins or rec.factory):
                    name = func.name()
                    rec.record(name, ins, row_length(name, args))
                raise
            if rec.quiet:
                return out
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and rec.has_tag(t)]
            if not ins and not rec.factory:
                return out
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            name = func.name()
            # a copy into a host tensor (``host.copy_(device_tensor)``) leaves that tensor on the host
            to_host = (
                name.split("::")[-1].split(".")[0] == "copy_" and outs and not rec.has_tag(outs[0]) and not rec.factory
            )
            device_outs = [] if to_host else outs
            rec.record(name, ins + device_outs, row_length(name, args))
            rec.tag(device_outs)
            return out

    return Functions(), Dispatch()


class _Timeout(Exception):
    pass


_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Failure|Interrupt|Exit)\b")


def _first_line(text: str) -> str:
    """The exception line of a traceback (``RuntimeError: ...``), else its last line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.match(ln)]
    return (errors[-1] if errors else lines[-1] if lines else "")[:300]


def receives_device(fn: Any) -> bool | None:
    """Whether an instantiated device test passes the device argument to its generic body (the ``param_kwargs``
    ``instantiate_device_type_tests`` bound to it name ``device``); None where that cannot be read."""
    seen = 0
    while fn is not None and seen < 20:
        code = getattr(fn, "__code__", None)
        if code is not None and code.co_name == "instantiated_test" and fn.__defaults__:
            bound = fn.__defaults__[0]
            return isinstance(bound, dict) and ("device" in bound or "devices" in bound)
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return None


def _run_case(cls: Any, method: str, traced: bool) -> tuple[str, str, list[dict[str, Any]]]:
    """(outcome, error, ops) of one run of ``cls.method``."""
    rec = _Recorder()
    rec.cpu_device_objects = receives_device(getattr(cls, method, None)) is not False

    @contextlib.contextmanager
    def recording() -> Any:
        functions, dispatch = _modes(rec)
        _quiet_assertions(rec)
        try:
            with functions, dispatch:
                yield
        finally:
            _quiet_assertions(None)

    outcome, error = run_unittest(cls, method, recording() if traced else contextlib.nullcontext(), CPU_RUN)
    return outcome, error, rec.result()


class RunLabel:
    """How a traced run names itself in its outcome's text (the CPU twin, the device-shadow run)."""

    def __init__(self, subject: str, where: str) -> None:
        self.subject, self.where = subject, where


CPU_RUN = RunLabel("the CPU twin", "on the CPU")


_CLASSES_SET_UP: set[Any] = set()
_CLASS_ERRORS: dict[Any, tuple[str, str]] = {}


def run_unittest(cls: Any, method: str, context: Any, label: RunLabel) -> tuple[str, str]:
    """(outcome, error) of one run of ``cls.method`` inside ``context``, stopped after ``TRACE_SECONDS``."""
    import unittest

    result = unittest.TestResult()
    if cls not in _CLASSES_SET_UP:
        # unittest runs setUpClass before a class's first test; a device test base sets the class's device_type
        # there (PrivateUse1TestBase: the backend's name), which a test without a device argument reads
        _CLASSES_SET_UP.add(cls)
        try:
            cls.setUpClass()
        except unittest.SkipTest as exc:
            _CLASS_ERRORS[cls] = ("skipped", str(exc)[:300])
        except Exception as exc:  # the class cannot run: every test of it fails the same way
            _CLASS_ERRORS[cls] = ("failed", f"setUpClass of {cls.__name__}: {type(exc).__name__}: {exc}"[:300])
    if cls in _CLASS_ERRORS:
        return _CLASS_ERRORS[cls]
    case = cls(method)

    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout(f"{label.subject} ran longer than {TRACE_SECONDS} s")

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(TRACE_SECONDS)
    try:
        with context:
            case.run(result)
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)
    problems = result.errors + result.failures
    if any("_Timeout" in text for _, text in problems):
        return "timeout", f"{label.subject} ran longer than {TRACE_SECONDS} s"
    if problems:
        return "failed", _first_line(problems[0][1])
    if result.unexpectedSuccesses:  # an upstream expected failure that passes: unittest fails it
        return "failed", f"unexpected success {label.where} (the test is marked expected to fail)"
    if result.expectedFailures:
        return "failed", f"expected failure {label.where}: " + _first_line(result.expectedFailures[0][1])
    if result.skipped:
        return "skipped", str(result.skipped[0][1])[:300]
    return "passed", ""


_ASSERT_ORIGINAL: dict[str, Any] = {}


def _quiet_assertions(rec: _Recorder | None) -> None:
    """While ``rec`` records, ``TestCase.assertEqual`` and ``torch.testing.assert_close`` are not recorded."""
    from torch.testing._internal import common_utils

    if "assertEqual" not in _ASSERT_ORIGINAL:
        _ASSERT_ORIGINAL["assertEqual"] = common_utils.TestCase.assertEqual
    original = _ASSERT_ORIGINAL["assertEqual"]
    if rec is None:
        common_utils.TestCase.assertEqual = original
        return

    def assert_equal(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec.quiet += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            rec.quiet -= 1

    common_utils.TestCase.assertEqual = assert_equal


def _import(root: Path, file: str) -> Any:
    from torch.testing._internal import common_device_type

    common_device_type.CPUTestBase.device_type = DEVICE  # the twin's device argument, recognisable
    return import_test_file(root, file)


def conftests(root: Path, file: str) -> list[Path]:
    """The ``conftest.py`` files pytest runs before it imports ``file`` of the checkout ``root``: one per folder from
    the checkout's root down to the file's own, outermost first."""
    root = root.resolve()
    folder = (root / file).resolve().parent
    try:
        parts = folder.relative_to(root).parts
    except ValueError:  # a file outside the checkout: pytest would not reach it from the root either
        return []
    folders = [root, *(root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1))]
    return [f / "conftest.py" for f in folders if (f / "conftest.py").is_file()]


class _ModuleCatcher:
    """A pytest plugin that keeps the module object pytest imports for ``path`` and collects no test of it: the
    trace runs its tests itself, and making items for a large file would cost more than importing it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.module: Any = None
        self.errors: list[str] = []

    def pytest_pycollect_makeitem(self, collector: Any, name: str, obj: Any) -> list[Any]:
        import pytest

        if isinstance(collector, pytest.Module) and Path(collector.path).resolve() == self.path:
            self.module = collector.obj
        return []

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors.append(str(report.longreprtext))


def _pytest_error(text: str) -> str:
    """The line of pytest's error report that says what went wrong (its last ``E   ...`` line), else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (said or lines or ["no error text"])[-1]


def import_test_file(root: Path, file: str) -> Any:
    """Import an upstream test file of the checkout ``root`` through pytest, with the options ``crcr run`` and the
    inventory use (:func:`runners.pytest_session.session_args`): the checkout's ``conftest.py`` files run as they do
    there, module code and hooks (``pytest_configure``, ``pytest_sessionstart``), so what they patch (names an old
    file imports, a backend's setup) is patched for the trace too. No test is collected: the caller runs them."""
    import io
    import tempfile

    import pytest

    from runners.pytest_session import session_args

    path = (root / file).resolve()
    for p in (str(path.parent), str(root / "test"), str(root)):
        if p not in sys.path:
            sys.path.insert(0, p)
    sys.argv = [str(path)]  # common_utils parses the command line when imported
    catcher = _ModuleCatcher(path)
    said = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="crcr-trace-session-") as tmp, contextlib.redirect_stdout(said), \
            contextlib.redirect_stderr(said):
        pytest.main([*session_args(root, Path(tmp), embedded=False), "-qq", "--collect-only", str(path)],
                    plugins=[catcher])
    if catcher.module is None:
        text = "\n".join(catcher.errors) or said.getvalue()
        found, where = re.search(r"while loading conftest '([^']+)'", text), file
        if found:
            conftest = Path(found.group(1)).resolve()
            inside = conftest.is_relative_to(root.resolve())
            where = conftest.relative_to(root.resolve()).as_posix() if inside else conftest.name
        raise ImportError(f"pytest could not load {where} (as crcr run loads {file}): {_pytest_error(text)}")
    return catcher.module


def import_or_report(load: Any, emit: Any) -> Any:
    """``load()``'s module, or None after emitting why: a file that does not import loses every trace (the static
    reading decides)."""
    try:
        return load()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        emit({"import_error": f"{type(exc).__name__}: {_first_line(str(exc))}"})
        return None


def trace_tests(root: Path, file: str, tests: list[list[str]], emit: Any) -> None:
    """Trace each ``[id, cls, method, device]`` of ``file`` and ``emit`` a JSON-able line per start and end."""
    module = import_or_report(lambda: _import(root, file), emit)
    if module is None:
        return

    def find(cls_name: str, method: str, device: str) -> tuple[Any, str | None, str]:
        cpu_cls, cpu_method = twin_class(cls_name, device), twin(method, device)
        cls = getattr(module, cpu_cls, None) if cpu_cls else None
        return cls, cpu_method, f"no CPU test {cpu_cls}.{cpu_method}"

    def run(cls: Any, method: str) -> tuple[str, str, list[dict[str, Any]]]:
        outcome, error, ops = _run_case(cls, method, traced=True)
        if outcome == "failed":
            plain, _, _ = _run_case(cls, method, traced=False)
            if plain == "passed":
                outcome, error = "trace_broke", f"passes on the CPU without the trace, fails under it: {error}"
        return outcome, error, ops

    run_traces(tests, emit, find, run, "cpu")


def run_traces(tests: list[list[str]], emit: Any, find: Any, run: Any, kind: str) -> None:
    """For each ``[id, cls, method, device]``: ``find`` the class and method to run (or why there is none), ``run``
    it to (outcome, error, ops) and ``emit`` a start line and a ``CpuTrace`` of ``kind``. Upstream's running-test
    lookup runs without its stack walk meanwhile (``runners.testfn``; the file is imported by now, so
    ``torch.testing._internal`` is imported as the file's own import order has it)."""
    with fast_test_fn_lookup():
        _run_traces(tests, emit, find, run, kind)


def _run_traces(tests: list[list[str]], emit: Any, find: Any, run: Any, kind: str) -> None:
    for test_id, cls_name, method, device in tests:
        emit({"start": test_id})
        start = time.perf_counter()
        cls, name, missing = find(cls_name, method, device)
        if cls is None or name is None or not hasattr(cls, name):
            emit(CpuTrace(id=test_id, outcome="no_twin", error=missing, kind=kind).model_dump())
            continue
        outcome, error, ops = run(cls, name)
        trace = CpuTrace(id=test_id, outcome=outcome, error=error, ops=[TraceOp(**o) for o in ops], kind=kind,
                         seconds=round(time.perf_counter() - start, 3), twin=f"{cls.__name__}.{name}")
        emit(trace.model_dump(exclude_none=True))


def main(argv: list[str]) -> int:
    os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "cpu"  # only the CPU twins are instantiated
    os.environ.pop("TORCH_TEST_DEVICES", None)  # warning filters stay as they are: tests record warnings
    return serve(argv, trace_tests)


def serve(argv: list[str], trace: Any) -> int:
    """``python -m MODULE IN OUT``: run ``trace(root, file, tests, emit)`` on the request IN, one JSON line per
    event appended to OUT (flushed at once: a crash loses only the test that was running)."""
    src, dst = argv[1], argv[2]
    request = json.loads(Path(src).read_text(encoding="utf-8"))
    with open(dst, "a", encoding="utf-8") as out:

        def emit(line: dict[str, Any]) -> None:
            out.write(json.dumps(line, sort_keys=True) + "\n")
            out.flush()

        trace(Path(request["root"]), request["file"], request["tests"], emit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
