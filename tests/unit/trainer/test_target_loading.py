"""A target checkpoint that does not match its architecture is refused (transformers only warns,
and a missing layer would be trained against with random weights); the extra weights of a
multimodal checkpoint (vision tower, MTP head) are allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dflash_trainer.model.target import TargetError, load_pretrained_target
from safetensors.torch import load_file, save_file

from .conftest import TINY_QWEN3, build_tiny_target


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "target"
    build_tiny_target(TINY_QWEN3).model.save_pretrained(folder)
    return folder


def rewrite(folder: Path, drop: str | None = None, add: str | None = None) -> None:
    path = folder / "model.safetensors"
    tensors = load_file(path)
    if drop:
        del tensors[drop]
    if add:
        tensors[add] = torch.zeros(4)
    save_file(tensors, path, metadata={"format": "pt"})


def load(folder: Path, tmp_path: Path) -> torch.nn.Module:
    return load_pretrained_target(
        str(folder), torch.float32, tmp_path / "cache", torch.device("cpu")
    )


def test_a_matching_checkpoint_loads(checkpoint: Path, tmp_path: Path) -> None:
    assert sum(p.numel() for p in load(checkpoint, tmp_path).parameters()) > 0


def test_a_missing_layer_is_refused_with_its_name(checkpoint: Path, tmp_path: Path) -> None:
    rewrite(checkpoint, drop="model.layers.3.mlp.down_proj.weight")

    with pytest.raises(
        TargetError, match=r"1 weight\(s\) missing: model\.layers\.3\.mlp\.down_proj\.weight"
    ):
        load(checkpoint, tmp_path)


def test_an_unexpected_weight_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    rewrite(checkpoint, add="model.layers.9.self_attn.q_proj.weight")

    with pytest.raises(
        TargetError, match=r"unexpected: model\.layers\.9\.self_attn\.q_proj\.weight"
    ):
        load(checkpoint, tmp_path)


@pytest.mark.parametrize("extra", ["mtp.fc.weight", "model.visual.patch_embed.proj.weight"])
def test_a_vision_tower_or_mtp_head_is_allowed(
    checkpoint: Path, tmp_path: Path, extra: str
) -> None:
    rewrite(checkpoint, add=extra)

    assert load(checkpoint, tmp_path) is not None
