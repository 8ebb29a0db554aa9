"""The train.yaml / eval.yaml the operator renders for every example run are valid trainer
configs (docs/trainer-config.md is the agreement; this catches drift on either side)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.children.config_map import build_eval_file, build_train_file
from dflash_trainer.eval.config import EvalConfig
from dflash_trainer.train.config import TrainConfig

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))
RUN_ROOT = "s3://bucket/dflash/ns/run/uid"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_operators_rendered_configs_validate_against_the_trainer_schema(
    example: Path,
) -> None:
    spec = DFlashRunSpec.model_validate(yaml.safe_load(example.read_text())["spec"])
    train = TrainConfig.model_validate(build_train_file(spec, RUN_ROOT))
    assert train.run_root == RUN_ROOT and train.drafter.block_size == spec.drafter.block_size
    for on_gpus in (True, False):
        evaluation = EvalConfig.model_validate(build_eval_file(spec, RUN_ROOT, on_gpus))
        assert evaluation.drafter == f"{RUN_ROOT}/final"
