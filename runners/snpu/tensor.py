"""``SnpuTensor``: the torch.Tensor that lives on the snpu device.

A wrapper subclass: PyTorch sees a tensor whose device is ``snpu:0`` (dispatch keys
PrivateUse1, AutogradPrivateUse1 and Python); its bytes live in ``_data``, a CPU tensor
standing for device memory. Views share ``_data``'s storage, so in-place writes through
a view reach the base, as on real hardware. Every aten call on it goes to
``runners.snpu.dispatch.call``.
"""

from __future__ import annotations

import torch

from runners.snpu import memory

DEVICE = torch.device("privateuseone", 0)
WRAPPER_STORAGE_BYTES = 1 << 48

# the last error raised by an snpu op during a backward pass (see __torch_dispatch__)
last_backward_error: Exception | None = None


class SnpuTensor(torch.Tensor):
    """A tensor on the simulated NPU; ``_data`` is its device memory (a CPU tensor)."""

    _data: torch.Tensor
    __slots__ = ("_data",)

    @staticmethod
    def __new__(cls, data: torch.Tensor, requires_grad: bool = False) -> SnpuTensor:
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            data.size(),
            strides=data.stride(),
            storage_offset=data.storage_offset(),
            dtype=data.dtype,
            layout=data.layout,
            device=DEVICE,
            requires_grad=requires_grad,
            # the wrapper's own storage holds no bytes; a large logical size lets
            # resize_/out= ops restride the wrapper in place (see dispatch._resync)
            storage_size=WRAPPER_STORAGE_BYTES,
        )
        r._data = data
        memory.track(r, data)
        return r

    # torch functions run as usual and reach us as aten ops in __torch_dispatch__
    __torch_function__ = torch._C._disabled_torch_function_impl

    def tolist(self):  # type: ignore[override]
        """Copy to the host first, as a real device does (torch refuses tolist on subclasses)."""
        return self.cpu().tolist()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # type: ignore[override]
        from runners.snpu import backward
        from runners.snpu.dispatch import call

        if not backward.in_backward():
            return call(func, args, kwargs or {})
        # Inside a C++ autograd node a Python error escaping here aborts the process in
        # PyTorch 2.13 (see runners.snpu.backward): record it and return its text in place of a tensor;
        # backward() raises the recorded error in the caller's thread.
        try:
            return call(func, args, kwargs or {})
        except Exception as exc:
            global last_backward_error
            last_backward_error = exc
            return backward.record(func, exc)

    def __repr__(self, *, tensor_contents: object = None) -> str:  # type: ignore[override]
        text = repr(self._data.detach())
        body = text[: text.rindex(")")]
        extras = [f"device='{self.device}'"]
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{type(self.grad_fn).__name__}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        # CPU reprs print dtype last; keep device first as PyTorch does for devices
        if ", dtype=" in body:
            head, dtype_part = body.rsplit(", dtype=", 1)
            return f"{head}, {extras[0]}, dtype={dtype_part}{''.join(', ' + e for e in extras[1:])})"
        return f"{body}, {', '.join(extras)})"

    __str__ = __repr__

    def __reduce_ex__(self, proto):  # pickling and deepcopy go through the CPU
        return (_rebuild, (self._data.detach().clone(), self.requires_grad))


def _rebuild(data: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return SnpuTensor(data, requires_grad=requires_grad)


def wrap(data: torch.Tensor) -> SnpuTensor:
    return SnpuTensor(data)
