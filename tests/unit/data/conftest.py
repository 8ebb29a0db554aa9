"""Fixtures of the data tests: the tiny tokenizers with the real Qwen3 / Qwen3.5 chat templates."""

from __future__ import annotations

import os

import pytest
from dflash_trainer.tiny.tokenizer import build_hf_tokenizer
from transformers import PreTrainedTokenizerFast

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> PreTrainedTokenizerFast:
    return build_hf_tokenizer("qwen3")


@pytest.fixture(scope="session")
def qwen3_5_tokenizer() -> PreTrainedTokenizerFast:
    return build_hf_tokenizer("qwen3_5")
