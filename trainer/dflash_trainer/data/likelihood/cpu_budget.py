"""Before scoring on CPU: the memory and time a target needs, read from its weight files'
headers (never loaded), against this machine; a target that does not fit is refused with the
flag that overrides it. GPU scoring is not estimated here (the pool is sized for the target).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from dflash_trainer.data.errors import BadInputError

OVERRIDE_FLAG = "--force-cpu-scoring"
# CPU scoring runs in float32: 4 bytes a parameter.
FLOAT32_BYTES = 4
# Beyond the weights: one 1,024-row chunk of float32 logits, their log-softmax and the rank's
# comparison (9 B a logit, hf_scorer.py) at a 256K vocabulary, activations, the interpreter.
OVERHEAD_BYTES = 4 * 1024**3
# Sustained float32 throughput of one core in the scorer's matmuls: ~48 GFLOP/s measured by
# `bench/bench_likelihood.py scoring` (576 tokens/s on 2 threads, docs/benchmarks.md); 40 is
# a round figure below it, so the estimate errs long.
FLOPS_PER_CORE = 40e9
# A scoring run estimated longer than this is refused too (a gate must not sit for a day).
MAX_SECONDS = 2 * 3600
# Bytes a parameter takes in a weight file whose dtype cannot be read (.bin, .pt): bf16.
UNKNOWN_FILE_BYTES_PER_PARAM = 2
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
                "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip


@dataclass(frozen=True)
class CpuEstimate:
    params: int
    memory_bytes: int
    available_bytes: int | None
    seconds: float
    cores: int

    def describe(self) -> str:
        have = f"{self.available_bytes / 1e9:.1f} GB available" if self.available_bytes else (
            "available memory unknown")  # fmt: skip
        return (f"{self.params / 1e9:.2f}B parameters: ~{self.memory_bytes / 1e9:.1f} GB in "
                f"float32 ({have}), ~{_duration(self.seconds)} on {self.cores} cores")  # fmt: skip


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def count_params(folder: Path) -> int:
    """Parameters in a model folder, from safetensors headers (exact), else file sizes."""
    total = 0
    for path in sorted(folder.iterdir()):
        if path.name.endswith(".safetensors"):
            with path.open("rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                count = 1
                for dim in entry["shape"]:
                    count *= int(dim)
                total += count
        elif path.name.endswith((".bin", ".pt")) and not path.name.startswith("training_args"):
            total += path.stat().st_size // UNKNOWN_FILE_BYTES_PER_PARAM
    return total


def available_memory() -> int | None:
    """MemAvailable (Linux), the memory a new process can take without swapping."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def estimate_cpu_scoring(folder: Path, tokens: int, cores: int | None = None) -> CpuEstimate:
    """Memory and time to score `tokens` tokens with the target in `folder` on CPU."""
    params = count_params(folder)
    cores = cores or max(len(os.sched_getaffinity(0)), 1)
    # A forward costs about 2 FLOPs a parameter a token.
    seconds = 2.0 * params * tokens / (FLOPS_PER_CORE * cores)
    memory = params * FLOAT32_BYTES + OVERHEAD_BYTES
    return CpuEstimate(params, memory, available_memory(), seconds, cores)


def check_cpu_scoring(estimate: CpuEstimate, forced: bool) -> str:
    """The estimate as one line; BadInputError when it does not fit and `forced` is not set."""
    line = f"CPU scoring estimate: {estimate.describe()}"
    if forced:
        return line
    too_big = (
        estimate.available_bytes is not None and estimate.memory_bytes > estimate.available_bytes
    )
    too_long = estimate.seconds > MAX_SECONDS
    if too_big or too_long:
        why = "does not fit in memory" if too_big else (
            f"would take longer than {_duration(MAX_SECONDS)}")  # fmt: skip
        raise BadInputError(
            f"{line}: the target {why}. Score on a GPU (--device cuda, or the canary / score "
            f"stage on the regeneration pool), pass fewer rows (--score-samples), or pass "
            f"{OVERRIDE_FLAG} to score on CPU anyway"
        )
    return line
