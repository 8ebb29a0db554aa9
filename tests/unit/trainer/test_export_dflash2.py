"""DFlash2's export: vLLM's native format (names, shapes, the `dflash_config` keys vLLM reads
without defaults), the speculators format for both architectures, and the exported folder
loaded into the independent reference forward (`dflash2_vllm_reference.py`) drafting the same
logits and the same walk as our drafter."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export import (
    drafter_config_from_export,
    export_drafter,
    load_exported_drafter,
)
from safetensors.torch import load_file


def load_parity_module() -> ModuleType:
    """The parity test's drafter, target parts and reference (tests are not a package)."""
    path = Path(__file__).with_name("test_dflash2_parity.py")
    spec = importlib.util.spec_from_file_location("dflash2_parity_for_export", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parity = load_parity_module()
BLOCK, CFG, HIDDEN, MASK = parity.BLOCK, parity.CFG, parity.HIDDEN, parity.MASK
frozen_target_parts, our_proposal = parity.frozen_target_parts, parity.our_proposal
trained_looking_drafter, vllm_ref = parity.trained_looking_drafter, parity.vllm_ref

META = {"target": "tiny", "targetLayerIds": [1, 3], "numLayers": 2, "blockSize": BLOCK,
        "data": "test", "steps": 3, "loss": 1.5, "architecture": "DFlash2DraftModel"}  # fmt: skip


def exported(tmp_path: Path, drafter: DFlashDrafter) -> tuple[dict[str, Any], dict[str, Any]]:
    export_drafter(drafter, str(tmp_path), META, dtype="float32")
    native = json.loads((tmp_path / "config.json").read_text())
    speculators = json.loads((tmp_path / "speculators" / "config.json").read_text())
    return native, speculators


def test_the_native_config_is_vllms_dflash2_with_the_four_keys_it_reads_without_defaults(
    tmp_path: Path,
) -> None:
    native, _ = exported(tmp_path, DFlash2Drafter(CFG))
    assert native["architectures"] == ["DFlash2DraftModel"]
    assert native["dflash_config"] == {
        "mask_token_id": MASK, "target_layer_ids": [1, 3], "conv_kernel_size": 3,
        "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 5,
    }  # fmt: skip
    # A config carrying no_rope_layers is re-routed to another drafter by vLLM.
    assert "no_rope_layers" not in json.dumps(native)
    assert native["block_size"] == BLOCK


def test_the_weights_carry_vllms_dflash2_names_and_shapes(tmp_path: Path) -> None:
    exported(tmp_path, DFlash2Drafter(CFG))
    weights = load_file(str(tmp_path / "model.safetensors"))
    taps, groups, rank = 3, HIDDEN // 16, 8
    for i in range(CFG.num_hidden_layers):
        for conv in ("attention_conv", "mlp_conv"):
            assert weights[f"layers.{i}.{conv}.base_kernel"].shape == (2, taps, HIDDEN)
            assert weights[f"layers.{i}.{conv}.kernel_projection.weight"].shape == (
                2 * taps * groups, HIDDEN,
            )  # fmt: skip
    assert weights["candidate_selector.predecessor_codebook"].shape == (CFG.vocab_size, rank)
    assert weights["candidate_selector.successor_codebook"].shape == (CFG.vocab_size, rank)
    assert weights["candidate_selector.hidden_projection.weight"].shape == (rank, HIDDEN)
    assert not [name for name in weights if "embed_tokens" in name or "lm_head" in name]


def test_a_dflash2_folder_reloads_as_dflash2_with_identical_weights(tmp_path: Path) -> None:
    drafter = trained_looking_drafter()
    exported(tmp_path, drafter)
    reloaded = load_exported_drafter(str(tmp_path))
    assert isinstance(reloaded, DFlash2Drafter)
    assert reloaded.config == CFG
    for name, value in drafter.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[name], value, rtol=0, atol=0)


def test_a_dflash2_config_without_one_of_vllms_keys_is_refused_naming_it(tmp_path: Path) -> None:
    native, _ = exported(tmp_path, DFlash2Drafter(CFG))
    del native["dflash_config"]["selector_rank"]
    with pytest.raises(ValueError, match="lacks selector_rank"):
        drafter_config_from_export(native)


def vllm_update_dflash2(config: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.34.0's speculators translation (`algos.py::update_dflash` then `update_dflash2`),
    as docs/trainer.md records it: the draft's transformer config plus `dflash_config`."""
    out = dict(config["transformer_layer_config"])
    out["architectures"] = ["DFlashDraftModel"]
    out["dflash_config"] = {
        "mask_token_id": config["mask_token_id"],
        "target_layer_ids": [i - 1 for i in config["aux_hidden_state_layer_ids"]],
    }
    if config["speculators_model_type"] == "dflash2":
        out["architectures"] = ["DFlash2DraftModel"]
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            if config.get(key) is not None:
                out["dflash_config"][key] = config[key]
    return out


@pytest.mark.parametrize("dflash2", [False, True], ids=["dflash", "dflash2"])
def test_the_speculators_config_translates_to_the_native_one(tmp_path: Path, dflash2: bool) -> None:
    cfg = CFG if dflash2 else drafter_config_from_export(
        {**exported(tmp_path / "x", DFlash2Drafter(CFG))[0], "architectures": ["DFlashDraftModel"]}
    )  # fmt: skip
    drafter = DFlash2Drafter(cfg) if dflash2 else DFlashDrafter(cfg)
    native, speculators = exported(tmp_path, drafter)
    assert speculators["speculators_model_type"] == ("dflash2" if dflash2 else "dflash")
    assert speculators["aux_hidden_state_layer_ids"] == [2, 4]
    methods = speculators["speculators_config"]["proposal_methods"]
    assert methods[0]["speculative_tokens"] == BLOCK - 1
    translated = vllm_update_dflash2(speculators)
    assert translated["architectures"] == native["architectures"]
    assert translated["dflash_config"] == native["dflash_config"]
    for key in ("hidden_size", "num_hidden_layers", "head_dim", "vocab_size", "rope_theta"):
        assert translated[key] == native[key]
    same = load_file(str(tmp_path / "speculators" / "model.safetensors"))
    assert same.keys() == load_file(str(tmp_path / "model.safetensors")).keys()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_exported_folder_in_the_reference_forward_drafts_what_our_drafter_drafts(
    tmp_path: Path, seed: int
) -> None:
    drafter = trained_looking_drafter()
    native, _ = exported(tmp_path, drafter)
    # The reference reads only what a server reads: the folder's weights and its config.
    weights = load_file(str(tmp_path / "model.safetensors"))
    knobs = native["dflash_config"]
    ref_cfg = {
        "layers": native["num_hidden_layers"], "heads": native["num_attention_heads"],
        "kv_heads": native["num_key_value_heads"], "head_dim": native["head_dim"],
        "eps": native["rms_norm_eps"], "theta": native["rope_theta"],
        "group_size": knobs["conv_group_size"], "block_size": native["block_size"],
        "top_k": knobs["selector_top_k"], "mask_token_id": knobs["mask_token_id"],
    }  # fmt: skip
    embed, lm_head = frozen_target_parts()
    gen = torch.Generator().manual_seed(20 + seed)
    features = torch.randn(6 + seed, 2 * HIDDEN, generator=gen)
    anchor_token = int(torch.randint(0, MASK, (), generator=gen))
    ours = our_proposal(drafter, embed, lm_head, anchor_token, features)
    theirs = vllm_ref.propose(weights, ref_cfg, embed, lm_head, anchor_token, features)
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-4, atol=1e-3)
    assert ours[2] == theirs[2]
    assert ours[2] != ours[0].argmax(-1).tolist()  # the selector decided, not the unary
