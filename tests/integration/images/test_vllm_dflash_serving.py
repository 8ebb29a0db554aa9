"""What the exported drafter's model card tells users to run, against the source of the real
`vllm` wheel of the regen image's version (its cached CPU environment): the speculative method
is `dflash`, a drafter mixing sliding and full layers needs the V2 model runner, which is vLLM's
default (the card says so for exactly those drafters), and the config fields our export writes
are the ones vLLM reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from dflash_dev import vllm_env
from dflash_trainer.model.export import build_model_card, vllm_serve_command

SLIDING, FULL = "sliding_attention", "full_attention"


@pytest.fixture(scope="module")
def vllm_source() -> Path:
    python = vllm_env.ensure()
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return Path(purelib) / "vllm"


def meta(layer_types: list[str]) -> dict[str, object]:
    return {
        "target": "Qwen/Qwen3.6-27B", "targetLayerIds": [1, 16, 31, 46, 61], "numLayers": 5,
        "blockSize": 16, "layerTypes": layer_types, "data": "s3://x", "steps": 1, "loss": 1.0,
    }  # fmt: skip


def test_vllm_refuses_mixed_drafters_on_the_v1_runner_and_runs_v2_by_default(
    vllm_source: Path,
) -> None:
    model = (vllm_source / "model_executor/models/qwen3_dflash.py").read_text()
    config = (vllm_source / "config/vllm.py").read_text()
    chooser = config[config.index("def use_v2_model_runner") :]
    chooser = chooser[: chooser.index("\n    def ")]

    assert "mixed sliding/full attention require" in model
    assert "use_v2_model_runner" in model
    # Unset, the variable leaves the choice to vLLM, whose last word is V2.
    assert 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", None)' in (vllm_source / "envs.py").read_text()
    assert chooser.rstrip().endswith("return True"), chooser
    assert '"dflash"' in (vllm_source / "config/speculative.py").read_text()
    # The non-causal flag our export writes for sliding drafters is read by vLLM.
    assert 'get("causal")' in model and '"is_causal"' in model


def test_the_card_of_a_mixed_drafter_says_it_needs_the_v2_runner() -> None:
    mixed = meta([SLIDING] * 4 + [FULL])

    assert vllm_serve_command(mixed).startswith("vllm serve ")
    assert "V2 model runner, its default since 0.33.0" in build_model_card(mixed)
    assert "V2 model runner" not in build_model_card(meta([FULL] * 5))
    assert '"method":"dflash"' in vllm_serve_command(mixed)
    assert '"num_speculative_tokens":15' in vllm_serve_command(mixed)


@pytest.mark.parametrize("layers", [[FULL] * 5, [SLIDING] * 5, []])
def test_uniform_drafters_are_served_with_the_plain_command(layers: list[str]) -> None:
    assert vllm_serve_command(meta(layers)).startswith("vllm serve ")
