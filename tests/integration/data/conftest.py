"""Fixtures of the data integration tests: one tiny target model for the whole session."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_trainer.tiny.build import TinyTarget, build_tiny_target


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> TinyTarget:
    return build_tiny_target(Path(tmp_path_factory.mktemp("tiny")) / "qwen3", arch="qwen3", seed=0)
