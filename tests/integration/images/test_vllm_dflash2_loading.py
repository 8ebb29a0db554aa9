"""Our DFlash2 export against the loader of the real `vllm` wheel (the regen image's version,
its cached CPU environment, as `test_vllm_dflash_serving.py`): the `dflash_config` keys vLLM
reads without a default, the parameter names and shapes its modules declare, the
architecture its registry maps, and the speculators translation it registers."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from dflash_dev import vllm_env
from dflash_trainer.model.config import DFlash2Settings, DrafterConfig
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.export import export_drafter
from safetensors.torch import load_file

MODEL = "model_executor/models/qwen3_dflash2.py"
HIDDEN, TAPS, GROUP, RANK, TOP_K, VOCAB = 64, 2, 16, 8, 4, 512
CFG = DrafterConfig(
    hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, num_target_layers=6,
    target_layer_ids=(1, 3), mask_token_id=511, block_size=8,
    dflash2=DFlash2Settings(
        conv_kernel_size=TAPS, conv_group_size=GROUP, selector_rank=RANK, selector_top_k=TOP_K
    ),
)  # fmt: skip


@pytest.fixture(scope="module")
def vllm_source() -> Path:
    python = vllm_env.ensure()
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return Path(purelib) / "vllm"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dflash2")
    meta = {"target": "t", "targetLayerIds": [1, 3], "numLayers": 2, "blockSize": 8,
            "data": "d", "steps": 1, "loss": 1.0, "architecture": "DFlash2DraftModel"}  # fmt: skip
    export_drafter(DFlash2Drafter(CFG), str(out), meta)
    return out


def required_keys(model_source: str) -> set[str]:
    """`dflash_config` keys the DFlash2 model reads as `draft_config["key"]` (no default)."""
    return set(re.findall(r'draft_config\["(\w+)"\]', model_source))


def class_body(source: str, name: str) -> str:
    start = source.index(f"class {name}(")
    end = source.find("\nclass ", start + 1)
    return source[start : end if end > 0 else len(source)]


def declared(body: str) -> dict[str, str]:
    """`self.<attr> = <Constructor>(<first arguments>` of one class body."""
    pattern = r"self\.(\w+) = ([\w.]+)\(\s*([^)]*)"
    return {
        attr: f"{ctor}({' '.join(args.split())}" for attr, ctor, args in re.findall(pattern, body)
    }


def test_our_dflash_config_carries_every_key_vllm_reads_without_a_default(
    vllm_source: Path, folder: Path
) -> None:
    model = (vllm_source / MODEL).read_text()
    config = json.loads((folder / "config.json").read_text())
    keys = required_keys(model)
    assert {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"} <= keys
    assert keys <= set(config["dflash_config"]), keys - set(config["dflash_config"])


def test_our_weight_names_and_shapes_are_the_ones_vllms_modules_declare(
    vllm_source: Path, folder: Path
) -> None:
    model = (vllm_source / MODEL).read_text()
    layer = declared(class_body(model, "DFlash2Qwen3DecoderLayer"))
    conv = declared(class_body(model, "DFlashGroupedConv"))
    selector = declared(class_body(model, "CandidateSelector"))
    assert layer["attention_conv"].startswith("DFlashGroupedConv(")
    assert layer["mlp_conv"].startswith("DFlashGroupedConv(")
    assert "torch.empty(2, taps, hidden_size" in conv["base_kernel"]
    assert "hidden_size, 2 * taps * self.num_groups" in conv["kernel_projection"]
    for codebook in ("predecessor_codebook", "successor_codebook"):
        assert "torch.empty(vocab_size, rank" in selector[codebook]
    assert "hidden_size, rank" in selector["hidden_projection"]
    assert "self.candidate_selector = CandidateSelector(" in model

    weights = load_file(str(folder / "model.safetensors"))
    groups = HIDDEN // GROUP
    expected = {
        "candidate_selector.predecessor_codebook": (VOCAB, RANK),
        "candidate_selector.successor_codebook": (VOCAB, RANK),
        "candidate_selector.hidden_projection.weight": (RANK, HIDDEN),
    }
    for i in range(CFG.num_hidden_layers):
        for name in ("attention_conv", "mlp_conv"):
            expected[f"layers.{i}.{name}.base_kernel"] = (2, TAPS, HIDDEN)
            expected[f"layers.{i}.{name}.kernel_projection.weight"] = (2 * TAPS * groups, HIDDEN)
    new = {n: tuple(w.shape) for n, w in weights.items() if "conv" in n or "selector" in n}
    assert new == expected
    assert all(w.dtype == torch.bfloat16 for w in weights.values())


def test_vllm_maps_our_architecture_to_its_dflash2_model_and_we_never_write_no_rope_layers(
    vllm_source: Path, folder: Path
) -> None:
    registry = (vllm_source / "model_executor/models/registry.py").read_text()
    assert re.search(r'"DFlash2DraftModel":\s*\(\s*"qwen3_dflash2"', registry)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["DFlash2DraftModel"]
    # vLLM >= 0.34 re-routes a config carrying `no_rope_layers` to another drafter
    # (config/speculative.py); the regen image's 0.33 has no such key. Never write it.
    assert "no_rope_layers" not in json.dumps(config)


def test_vllms_speculators_translation_reads_our_dflash2_keys(
    vllm_source: Path, folder: Path
) -> None:
    algos = next((vllm_source / "transformers_utils/configs/speculators").glob("algos.py"))
    text = algos.read_text()
    assert '@register_speculator("dflash2")' in text
    updater = text[text.index('@register_speculator("dflash2")') :]
    speculators = json.loads((folder / "speculators" / "config.json").read_text())
    assert speculators["speculators_model_type"] == "dflash2"
    for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
        assert f'"{key}"' in updater
        assert speculators[key] == getattr(CFG.dflash2, key)
    # `update_dflash` subtracts one from the aux ids (vLLM PR #40727).
    assert "i - 1 for i in" in text
    assert [i - 1 for i in speculators["aux_hidden_state_layer_ids"]] == [1, 3]
