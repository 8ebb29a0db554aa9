"""The vLLM engine for real, on a GPU machine with vLLM installed (skipped everywhere else)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.storage import read_json
from dflash_trainer.tiny.build import build_tiny_target
from dflash_trainer.tiny.model import TinySize
from dflash_trainer.tiny.prompts import build_prompt_records

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_vllm_engine_regenerates_a_shard_on_a_tiny_local_model(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    # head_dim 64: vLLM's attention kernels do not take the default tiny head size of 16
    target = build_tiny_target(tmp_path / "tiny", size=TinySize(hidden=256, heads=4, kv_heads=2))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in build_prompt_records(64)))
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- {{name: tiny, uri: {prompts}, format: openai-messages}}\n")
    log = tmp_path / "log"
    code = regenerate_main([
        "--run-root", str(tmp_path / "run"), "--sources", str(sources), "--model", str(target.path),
        "--engine", "vllm", "--max-tokens", "64", "--gpu-memory-utilization", "0.3",
        "--enforce-eager", "--termination-log", str(log),
    ])  # fmt: skip
    assert code == 0
    manifest = read_json(ShardStore(str(tmp_path / "run"), 0, 1).commit_uri)
    assert manifest["samples"] == 64 and manifest["outputTokens"] > 0
    assert manifest["engine"] == "vllm" and json.loads(log.read_text())["ok"]
