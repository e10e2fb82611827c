"""snpu errors raised inside autograd's backward reach the caller with their own type.

An aten op that ``SnpuTensor.__torch_dispatch__`` runs for a C++ autograd node (the
backward of ``native_group_norm``, ``mul``...) must not raise: PyTorch 2.13 unwinds the
Python error through the engine's stream guard, whose Python device guard calls
``std::terminate`` (``PythonDeviceGuard::exchangeStream``), and the process dies. So the
dispatcher records the error here and returns the error's text in place of a tensor; the
engine fails with ``RuntimeError: Unable to cast ... to Tensor``. ``install()`` wraps
the one Python entry of the engine (``torch.autograd._engine_run_backward``, used by
``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad``, the same
two names ``torch.compiler`` patches): when the engine fails and an snpu error was
recorded during that call, the recorded error is raised instead, so a test sees
``SnpuUnsupportedOpError`` (a ``NotImplementedError``) or ``SnpuDtypeError`` with the
original message, as from a real backend.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

_lock = threading.Lock()
_pending: list[BaseException] = []


def in_backward() -> bool:
    """True while the autograd engine evaluates a C++ node on this thread.

    The backward of a Python ``autograd.Function`` is excluded: an error raised there
    travels as an ordinary Python exception (the engine survives it), and the function's
    own ``try``/``except`` must see it.
    """
    node = torch._C._current_autograd_node()
    return node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction)


def record(func: Any, exc: BaseException) -> Any:
    """Keep ``exc`` for the caller of ``backward()``; the text the op returns in place of its result.

    That text is one string per value the op returns, so even the engine's own
    message names the error: ``Unable to cast SnpuUnsupportedOpError: ... to Tensor``.
    """
    with _lock:
        _pending.append(exc)
    text = f"{type(exc).__name__}: {exc}"
    returns = len(func._schema.returns)
    return text if returns <= 1 else tuple(text for _ in range(returns))


def take() -> BaseException | None:
    """The first error recorded since the last ``take()`` (the one that stopped the engine)."""
    with _lock:
        first = _pending[0] if _pending else None
        _pending.clear()
    return first


def install() -> None:
    """Re-raise recorded snpu errors from ``backward()`` / ``autograd.grad`` (idempotent)."""
    engine_run = torch.autograd.graph._engine_run_backward
    if getattr(engine_run, "_snpu_errors", False):
        return

    @functools.wraps(engine_run)
    def run_backward(*args: Any, **kwargs: Any) -> Any:
        take()  # an error some earlier caller caught itself is not this call's
        try:
            return engine_run(*args, **kwargs)
        except Exception:  # the engine fails with "Unable to cast ... to Tensor"
            recorded = take()
            if recorded is None:
                raise
            raise recorded.with_traceback(recorded.__traceback__) from None

    run_backward._snpu_errors = True  # type: ignore[attr-defined]
    torch.autograd.graph._engine_run_backward = run_backward
    torch.autograd._engine_run_backward = run_backward
