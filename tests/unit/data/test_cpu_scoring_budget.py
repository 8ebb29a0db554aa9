"""A CPU scoring run estimates the target's memory and time from its weight files' headers
before loading anything, and refuses a target that does not fit, naming the override flag."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.likelihood import cpu_budget
from dflash_trainer.data.likelihood.cpu_budget import check_cpu_scoring, estimate_cpu_scoring


def fake_model(folder: Path, params: int) -> Path:
    """A weights file whose header declares `params` bf16 parameters (no data: never read)."""
    folder.mkdir()
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "BF16", "shape": [params], "data_offsets": [0, 0]}})  # fmt: skip
    raw = header.encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return folder


def test_a_27b_target_on_a_64_gb_cpu_is_refused_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_budget, "available_memory", lambda: 64 * 10**9)
    estimate = estimate_cpu_scoring(fake_model(tmp_path / "m", 27_000_000_000), 1_000, cores=16)
    assert estimate.params == 27_000_000_000
    assert estimate.memory_bytes > 108 * 10**9  # float32 weights alone
    with pytest.raises(BadInputError) as caught:
        check_cpu_scoring(estimate, forced=False)
    assert "does not fit in memory" in str(caught.value)
    assert "--force-cpu-scoring" in str(caught.value) and "~112.3 GB" in str(caught.value)
    assert check_cpu_scoring(estimate, forced=True).startswith("CPU scoring estimate: 27.00B")


def test_hours_of_cpu_scoring_are_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_budget, "available_memory", lambda: 10**12)
    estimate = estimate_cpu_scoring(fake_model(tmp_path / "m", 8_000_000_000), 64 * 2_000, cores=2)
    with pytest.raises(BadInputError, match=r"would take longer than 2\.0 h"):
        check_cpu_scoring(estimate, forced=False)


def test_a_tiny_target_passes_with_its_estimate_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_budget, "available_memory", lambda: 8 * 10**9)
    estimate = estimate_cpu_scoring(fake_model(tmp_path / "m", 5_000_000), 20_000, cores=2)
    line = check_cpu_scoring(estimate, forced=False)
    assert "0.01B parameters" in line and "s on 2 cores" in line
