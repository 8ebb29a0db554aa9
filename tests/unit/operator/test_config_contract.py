"""The train.yaml and eval.yaml the operator renders load with the trainer's own config models
(docs/data-contracts.md section 7), for every example DFlashRun."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api.validation import parse_spec
from dflash_operator.children.config_map import build_config_data
from dflash_trainer.eval.config import load_eval_config
from dflash_trainer.train.config import load_train_config

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.yaml"))
ROOT = "s3://artifacts/dflash/ns/run/uid"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("on_gpus", [True, False])
def test_the_rendered_training_and_evaluation_configs_load_in_the_trainer(
    example: Path, on_gpus: bool, tmp_path: Path
) -> None:
    spec = parse_spec(yaml.safe_load(example.read_text())["spec"])
    data = build_config_data(spec, ROOT, eval_on_gpus=on_gpus)
    (tmp_path / "train.yaml").write_text(data["train.yaml"])
    (tmp_path / "eval.yaml").write_text(data["eval.yaml"])

    train = load_train_config(tmp_path / "train.yaml")
    evaluation = load_eval_config(tmp_path / "eval.yaml")

    assert train.run_root == ROOT
    assert train.drafter.block_size == spec.drafter.block_size
    assert train.optim.epochs == spec.training.epochs
    assert train.data.max_seq_len == spec.tokenization.max_seq_len
    assert evaluation.drafter == f"{ROOT}/final"
    assert evaluation.engine == ("vllm" if on_gpus else "builtin")


def test_the_config_rendered_for_training_holds_out_evaluation_prompts_sized_by_the_tokenized_samples(
    sim: Any,
) -> None:
    world = sim()
    world.step()
    for name, result in (
        ("r1-regen", {"samples": 10}),
        ("r1-audit-completions", {"verdict": "pass"}),
        ("r1-tokenize", {"samples": 1000}),
        ("r1-audit-tokens", {"verdict": "pass"}),
    ):
        world.finish(name, result=result, pods=4 if name == "r1-regen" else 1)
        world.settle()
    assert world.status["phase"] == "Training"

    files = world.manifests[("ConfigMap", "r1-config")]["data"]
    train = yaml.safe_load(files["train.yaml"])
    evaluation = yaml.safe_load(files["eval.yaml"])

    assert train["data"]["holdout_fraction"] == 0.192  # 128 prompts x 1.5 / 1000 samples
    assert evaluation["prompts"]["holdout_fraction"] == 0.192
