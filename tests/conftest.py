"""Shared pytest configuration: markers by folder, and the real cluster / S3 fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["dflash_dev.pytest_plugin"]

TESTS = Path(__file__).parent
# Tests never reach the Hugging Face Hub: every model is built from a config.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(TESTS).parts
        if parts and parts[0] in {"unit", "integration", "e2e"}:
            item.add_marker(getattr(pytest.mark, parts[0]))
