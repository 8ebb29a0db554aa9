"""The memory plan's shapes and CLI: parameter counts equal the real models', the known table
holds what the published configs say, and the command exits 0 / 1 / 2 as documented."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_memplan.estimate import (
    RankSetup,
    default_loss_chunk_tokens,
    estimate_rank_memory,
)
from dflash_memplan.known import known_target_shape
from dflash_memplan.shapes import (
    ShapeError,
    build_drafter_shape,
    count_default_taps,
    target_shape_from_config,
)
from dflash_memplan.units import parse_memory_size
from dflash_trainer.model.config import build_drafter_config, build_target_layer_ids
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.plan.__main__ import main
from dflash_trainer.train import loss

from .conftest import TINY_HYBRID, TINY_QWEN3, build_tiny_target

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("config", [TINY_QWEN3, TINY_HYBRID], ids=["qwen3", "qwen3_5"])
def test_target_params_equal_the_built_model(config: dict[str, Any]) -> None:
    target = build_tiny_target(config)
    shape = target_shape_from_config(config)
    assert shape.count_params() == sum(p.numel() for p in target.model.parameters())


@pytest.mark.parametrize(
    "overrides",
    [{}, {"intermediate_size": 96, "num_attention_heads": 8, "num_key_value_heads": 4}],
)
def test_drafter_params_equal_the_built_drafter(overrides: dict[str, int]) -> None:
    target = build_tiny_target(TINY_QWEN3)
    cfg = build_drafter_config(target.config, num_layers=3, block_size=8, **overrides)
    shape = build_drafter_shape(
        target_shape_from_config(TINY_QWEN3), num_layers=3, block_size=8, **overrides
    )
    assert shape.count_params() == sum(p.numel() for p in DFlashDrafter(cfg).parameters())


@pytest.mark.parametrize(("layers", "draft"), [(36, 5), (64, 5), (6, 2), (4, 3), (8, 1)])
def test_default_taps_match_the_trainer(layers: int, draft: int) -> None:
    assert count_default_taps(layers, draft) == len(build_target_layer_ids(layers, draft))


@pytest.mark.parametrize("vocab", [512, 151936, 248320, 10**9])
def test_loss_chunk_default_is_the_trainers(vocab: int) -> None:
    assert default_loss_chunk_tokens(vocab) == loss.default_loss_chunk_tokens(vocab)


def test_known_targets_have_their_published_sizes() -> None:
    qwen3_8b = known_target_shape("Qwen/Qwen3-8B")
    qwen36 = known_target_shape("qwen/qwen3.6-27b/")
    assert qwen3_8b is not None and qwen36 is not None
    assert 8.1e9 < qwen3_8b.count_params() < 8.3e9  # "8.2B" on the model card
    assert 26.5e9 < qwen36.count_params() < 27.5e9  # text model of the 27B
    drafter = build_drafter_shape(qwen36, num_layers=5, block_size=16)
    assert 1.83e9 < drafter.count_params() < 1.85e9  # issue 12: "the 1.84B drafter"
    assert known_target_shape("acme/unknown") is None


def test_a_nested_text_config_is_read() -> None:
    flat = target_shape_from_config(TINY_HYBRID)
    nested = target_shape_from_config({"model_type": "qwen3_5", "text_config": TINY_HYBRID})
    assert nested.count_params() == flat.count_params()
    assert nested.layer_types.count("linear_attention") == 3


def test_an_unsupported_model_type_is_named() -> None:
    with pytest.raises(ShapeError, match="model_type='llama' is not supported"):
        target_shape_from_config({"model_type": "llama"})


@pytest.mark.parametrize(
    ("text", "size"),
    [("96Gi", 96 << 30), ("96GB", 96 * 10**9), ("180G", 180 * 10**9), ("1.5TiB", 3 << 39)],
)
def test_memory_sizes_parse(text: str, size: int) -> None:
    assert parse_memory_size(text) == size


def test_a_memory_size_without_a_known_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="accepted: a number with a unit"):
        parse_memory_size("96 gigs")


def write_train_yaml(tmp_path: Path, **sections: Any) -> Path:
    doc: dict[str, Any] = {"run_root": str(tmp_path), "target": {"path": "Qwen/Qwen3-8B"}}
    doc.update(sections)
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_plan_fits_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_train_yaml(tmp_path, data={"batch_size": 1})
    assert main([str(path), "--gpu-memory", "180Gi", "--world-size", "8"]) == 0
    out = capsys.readouterr().out
    for term in ("frozen target", "activations", "LM-head loss chunk", "workspace", "fits"):
        assert term in out


def test_a_plan_that_does_not_fit_exits_1_naming_the_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_train_yaml(tmp_path, data={"batch_size": 8})
    assert main([str(path), "--gpu-memory", "80Gi", "--world-size", "8"]) == 1
    captured = capsys.readouterr()
    assert "does NOT fit" in captured.out
    assert "data.batch_size 8 -> " in captured.err


def test_an_unknown_target_without_config_says_how_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_train_yaml(tmp_path, target={"path": "acme/secret-model"})
    assert main([str(path), "--world-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "--target-config" in err and "skipped" in err


def test_a_target_config_file_gives_the_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3_5", "text_config": TINY_HYBRID}))
    path = write_train_yaml(tmp_path, target={"path": "acme/secret-model"})
    args = [str(path), "--target-config", str(config), "--world-size", "1", "--gpu-memory", "8Gi"]
    assert main(args) == 0
    assert "vocab 512" in capsys.readouterr().out


def test_the_qwen36_example_fits_four_rtx_pro_6000_per_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = REPO / "examples" / "qwen3.6-27b.yaml"
    assert main([str(example), "--gpu-memory", "95Gi"]) == 0, capsys.readouterr()


def test_fsdp2_shards_the_drafter_state_but_not_the_target() -> None:
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    drafter = build_drafter_shape(target, num_layers=5, block_size=16)
    base = RankSetup(batch_size=1, max_seq_len=3072, anchors_per_sequence=512,
                     loss_chunk_tokens=1024, world_size=8)  # fmt: skip
    ddp = estimate_rank_memory(target, drafter, base)
    fsdp = estimate_rank_memory(
        target, drafter, RankSetup(**{**base.__dict__, "strategy": "fsdp2"})
    )
    assert ddp.persistent[0] == fsdp.persistent[0]
    assert fsdp.total_bytes < ddp.total_bytes - (20 << 30)


def test_a_dflashrun_that_does_not_fit_is_told_its_spec_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = yaml.safe_load((REPO / "examples" / "qwen3.6-27b.yaml").read_text())
    run["spec"]["training"].update(activationCheckpointing=False)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    assert main([str(path), "--gpu-memory", "95Gi"]) == 1
    err = capsys.readouterr().err
    assert "spec.training.batchSize 4 -> 2" in err
    assert "spec.training.activationCheckpointing false -> true" in err
    assert "spec.training.anchorsPerSequence 512 -> 256" in err
    assert "loss_chunk" not in err  # not a spec field: the trainer sizes it by the vocabulary
