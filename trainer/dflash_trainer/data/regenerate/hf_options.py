"""What the transformers engine asks of transformers: the device, the dtype and the continuous
batching options, each resolved against what this machine and the installed transformers offer.

Pure decisions (no model is loaded here); `hf_engine` applies them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from dflash_trainer.data.errors import BadInputError

DEVICES = ("auto", "cpu", "cuda")
# `--batching`: transformers' continuous batching, static batches of `generate`, or the first
# where it can run the sampling asked for.
BATCHING = ("auto", "continuous", "static")
# vLLM's `--dtype` names (the regeneration CLI takes one flag for both engines), with the torch
# dtype each one means.
DTYPE_NAMES: Mapping[str, str] = {
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}  # fmt: skip
AUTO = "auto"
HALF_DTYPES = frozenset({"bfloat16", "float16"})
# Renamed options of transformers' ContinuousBatchingConfig: ours first, then older names.
# transformers 5.17 calls a cache page a "block" (`block_size`); 5.24 calls it `page_size`.
OPTION_ALIASES: Mapping[str, tuple[str, ...]] = {"page_size": ("page_size", "block_size")}
# Options that shape the answers (the sampling seed) or the batch: a transformers without them
# cannot stream as asked, and the engine uses static batches instead.
REQUIRED_OPTIONS = frozenset({"seed", "max_requests_per_batch"})


class EngineOptionError(BadInputError):
    """A device or dtype the engine cannot use; the message names the flag and what is accepted."""


def resolve_device(requested: str, cuda_available: bool) -> str:
    """`--device`: `auto` is the GPU when torch sees one, else the CPU."""
    if requested not in DEVICES:
        raise EngineOptionError(
            f"--device {requested!r} is not a device: use one of {', '.join(DEVICES)}"
        )
    if requested == "cuda" and not cuda_available:
        raise EngineOptionError(
            "--device cuda: torch sees no CUDA GPU here (use --device cpu or auto)"
        )
    if requested == AUTO:
        return "cuda" if cuda_available else "cpu"
    return requested


def resolve_streaming(batching: str) -> bool | None:
    """`--batching` as the engine's `streaming` (None: the engine decides)."""
    if batching not in BATCHING:
        raise EngineOptionError(
            f"--batching {batching!r} is not a mode: use one of {', '.join(BATCHING)}"
        )
    return {"auto": None, "continuous": True, "static": False}[batching]


def resolve_dtype(declared: str, device: str, checkpoint_dtype: str | None) -> str:
    """The torch dtype name to load the target in. A declared dtype is used as declared; `auto`
    is float32 on the CPU (exact, and CPU half precision is slower there) and, on a GPU, the
    checkpoint's own half precision, or bfloat16 for a float32 checkpoint (as vLLM's `auto`
    serves such a checkpoint in half precision)."""
    name = declared.strip().lower()
    if name == AUTO:
        if device == "cpu":
            return "float32"
        stored = (checkpoint_dtype or "").removeprefix("torch.")
        return stored if stored in HALF_DTYPES else "bfloat16"
    if name not in DTYPE_NAMES:
        accepted = ", ".join([AUTO, *DTYPE_NAMES])
        raise EngineOptionError(f"--dtype {declared!r} is not a dtype: use one of {accepted}")
    return DTYPE_NAMES[name]


def accepted_options(config_class: Any) -> frozenset[str]:
    """The keyword arguments a ContinuousBatchingConfig class takes (a dataclass in 5.17 and
    5.24; its `__init__` signature otherwise)."""
    if dataclasses.is_dataclass(config_class):
        return frozenset(f.name for f in dataclasses.fields(config_class) if f.init)
    parameters = inspect.signature(config_class.__init__).parameters.values()
    return frozenset(p.name for p in parameters if p.name != "self")


def build_batching_options(
    wanted: Mapping[str, Any], accepted: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """(the options this transformers takes, under its own names; the ones it does not know).

    An option is passed under the first of its names (OPTION_ALIASES) that the installed
    version accepts; one it has under no name is left out and returned, so the caller says so
    (and falls back to static batches if it is one of REQUIRED_OPTIONS)."""
    names = frozenset(accepted)
    options: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in wanted.items():
        name = next((n for n in OPTION_ALIASES.get(key, (key,)) if n in names), None)
        if name is None:
            dropped.append(key)
        else:
            options[name] = value
    return options, dropped
