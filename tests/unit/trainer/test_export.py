"""The servable export: documented key names and config fields, reload with identical outputs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.config import build_drafter_config
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export import export_drafter, load_exported_drafter, update_model_card
from safetensors import safe_open
from transformers import Qwen3Config

TARGET = Qwen3Config(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=6,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
META = {
    "target": "tiny",
    "targetLayerIds": [1, 3],
    "numLayers": 2,
    "blockSize": 4,
    "data": "test",
    "steps": 3,
    "loss": 1.5,
}
# reference/dflash.md, "Checkpoint format".
LAYER_KEYS = [
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
]
CONFIG_KEYS = {
    "architectures",
    "model_type",
    "attention_bias",
    "attention_dropout",
    "block_size",
    "dflash_config",
    "dtype",
    "head_dim",
    "hidden_act",
    "hidden_size",
    "initializer_range",
    "intermediate_size",
    "layer_types",
    "max_position_embeddings",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "num_target_layers",
    "rms_norm_eps",
    "rope_scaling",
    "rope_theta",
    "sliding_window",
    "tie_word_embeddings",
    "use_cache",
    "use_sliding_window",
    "vocab_size",
}


def build_drafter(**overrides: object) -> DFlashDrafter:
    torch.manual_seed(0)
    cfg = build_drafter_config(TARGET, num_layers=2, block_size=4, mask_token_id=511, **overrides)  # type: ignore[arg-type]
    drafter = DFlashDrafter(cfg)
    for param in drafter.parameters():  # non-trivial norms too, so every key matters
        param.data.add_(torch.randn_like(param) * 0.01)
    return drafter.eval()


def run(drafter: DFlashDrafter) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    layout = BlockLayout(torch.tensor([[5, 9]]), context_len=12, block_size=4)
    embeds = torch.randn(1, 8, 64, generator=gen)
    features = torch.randn(1, 12, 128, generator=gen)
    with torch.no_grad():
        out: torch.Tensor = drafter(embeds, features, layout, backend="dense")
    return out


def test_the_weights_file_has_exactly_the_documented_key_names(tmp_path: Path) -> None:
    export_drafter(build_drafter(), str(tmp_path), META)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
        fc_shape = list(handle.get_slice("fc.weight").get_shape())
    expected = {f"layers.{i}.{k}" for i in range(2) for k in LAYER_KEYS}
    expected |= {"fc.weight", "hidden_norm.weight", "norm.weight"}
    assert keys == expected
    assert fc_shape == [64, 2 * 64]


def test_the_config_has_exactly_the_documented_fields(tmp_path: Path) -> None:
    export_drafter(build_drafter(), str(tmp_path), META)
    config = json.loads((tmp_path / "config.json").read_text())
    assert set(config) == CONFIG_KEYS
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["model_type"] == "qwen3"
    assert config["dflash_config"] == {"mask_token_id": 511, "target_layer_ids": [1, 3]}
    assert config["block_size"] == 4
    assert config["num_target_layers"] == 6
    assert config["hidden_size"] == 64 and config["vocab_size"] == 512


def test_the_export_reloads_with_identical_outputs(tmp_path: Path) -> None:
    drafter = build_drafter()
    export_drafter(drafter, str(tmp_path), META, dtype="float32")
    reloaded = load_exported_drafter(str(tmp_path)).eval()
    assert torch.equal(run(reloaded), run(drafter))


def test_a_bf16_export_reloads_within_bf16_rounding(tmp_path: Path) -> None:
    drafter = build_drafter()
    export_drafter(drafter, str(tmp_path), META)
    torch.testing.assert_close(
        run(load_exported_drafter(str(tmp_path))), run(drafter), atol=0.05, rtol=0.05
    )


def test_sliding_window_drafters_declare_their_blocks_bidirectional(tmp_path: Path) -> None:
    drafter = build_drafter(layer_types=["sliding_attention", "full_attention"], sliding_window=32)
    export_drafter(drafter, str(tmp_path), META)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["dflash_config"]["causal"] is False
    assert config["use_sliding_window"] is True and config["sliding_window"] == 32
    reloaded = load_exported_drafter(str(tmp_path))
    windows = [layer.self_attn.window for layer in reloaded.layers]  # type: ignore[union-attr]
    assert windows == [32, None]


def test_the_model_card_names_target_data_steps_and_acceptance(tmp_path: Path) -> None:
    export_drafter(build_drafter(), str(tmp_path), META)
    card = (tmp_path / "README.md").read_text()
    assert "`tiny`" in card and "| Training steps | 3" in card and "not measured yet" in card
    update_model_card(str(tmp_path), acceptanceLength=2.25, evalPrompts=8)
    assert "2.250 (pooled mean over 8 held-out prompts" in (tmp_path / "README.md").read_text()
