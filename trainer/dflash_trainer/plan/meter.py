"""Peak bytes of live tensors on CPU, counted at the dispatcher: every storage an operator
creates is added when it appears and subtracted when it is freed (torch has no CPU allocator
statistics). Used to check the memory plan against real training steps (tests, docs).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


class LiveTensorMeter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """`with LiveTensorMeter() as meter:` ... `meter.peak_bytes`; storages are counted once
    (views and in-place results share theirs). Tensors made before entering count only when
    passed to `track` (parameters, buffers)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._sizes: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.current_bytes = 0
        self.peak_bytes = 0

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        for tensor in tensors:
            self._add(tensor)

    def reset_peak(self) -> None:
        self.peak_bytes = self.current_bytes

    def _add(self, tensor: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or tensor.is_meta:
            return
        storage = tensor.untyped_storage()
        if storage in self._sizes:
            return
        size = storage.nbytes()
        self._sizes[storage] = size
        self.current_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        weakref.finalize(storage, self._free, size)

    def _free(self, size: int) -> None:
        self.current_bytes -= size

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self._add(item)
        return out
