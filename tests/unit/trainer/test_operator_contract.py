"""The train.yaml / eval.yaml the operator renders for every example run are valid trainer
configs (docs/trainer-config.md is the agreement; this catches drift on either side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _spec(**evaluation: Any) -> DFlashRunSpec:
    example = yaml.safe_load((EXAMPLES[0].parent / "qwen3-8b.yaml").read_text())["spec"]
    example["evaluation"] = {**(example.get("evaluation") or {}), **evaluation}
    return DFlashRunSpec.model_validate(example)


def test_every_evaluation_field_reaches_the_evaluation_config() -> None:
    spec = _spec(
        prompts={"uri": "pvc://datasets/eval/prompts.jsonl", "format": "sharegpt"},
        maxPrompts=77,
        maxNewTokens=99,
        temperature=0.7,
    )

    evaluation = EvalConfig.model_validate(build_eval_file(spec, RUN_ROOT, on_gpus=False))
    train = TrainConfig.model_validate(build_train_file(spec, RUN_ROOT, samples=1000))

    source = evaluation.prompts.source
    assert source is not None
    assert source.uri == "/mnt/pvc/datasets/eval/prompts.jsonl"
    assert source.format == "sharegpt"
    assert source.enable_thinking is spec.target.thinking
    assert evaluation.prompts.num_prompts == 77
    assert evaluation.max_new_tokens == 99
    assert evaluation.temperature == 0.7
    # Prompts of their own: nothing is held out of training.
    assert evaluation.prompts.holdout_fraction == 0 and train.data.holdout_fraction == 0


# The fields of spec.evaluation that do not go into eval.yaml, and where they go instead.
NOT_IN_EVAL_YAML = {
    "enabled": "the pipeline (plan/stages.py)",
    "image": "the eval Job's image",
    "node_pool": "the eval Job's placement",
    "active_deadline_seconds": "the eval Job's activeDeadlineSeconds",
    "resources": "the eval pod's resources",
}


def test_no_evaluation_field_is_forgotten() -> None:
    from dflash_operator.api.spec_training import EvaluationSpec

    rendered = {"prompts", "max_prompts", "max_new_tokens", "temperature"}
    assert set(EvaluationSpec.model_fields) == rendered | set(NOT_IN_EVAL_YAML)


@pytest.mark.parametrize(
    ("samples", "max_prompts", "expected"),
    [(None, 128, 0.01), (902_087, 128, 0.0002128), (1000, 10, 0.015), (40, 16, 0.25)],
)
def test_training_holds_out_the_evaluation_prompts_with_the_same_fraction_on_both_sides(
    samples: int | None, max_prompts: int, expected: float
) -> None:
    spec = _spec(maxPrompts=max_prompts)

    train = TrainConfig.model_validate(build_train_file(spec, RUN_ROOT, samples))
    evaluation = EvalConfig.model_validate(build_eval_file(spec, RUN_ROOT, False, samples))

    assert train.data.holdout_fraction == pytest.approx(expected, rel=1e-3)
    assert evaluation.prompts.holdout_fraction == train.data.holdout_fraction
    assert evaluation.prompts.source is None


def test_no_hold_out_without_evaluation() -> None:
    spec = _spec(enabled=False)
    assert (
        TrainConfig.model_validate(build_train_file(spec, RUN_ROOT, 5000)).data.holdout_fraction
        == 0
    )


def test_training_and_evaluation_load_the_very_target_the_data_stages_used() -> None:
    example = yaml.safe_load((EXAMPLES[0].parent / "qwen3-8b.yaml").read_text())["spec"]
    example["target"]["revision"] = "3f2a9c1"
    hub = DFlashRunSpec.model_validate(example)

    train = TrainConfig.model_validate(build_train_file(hub, RUN_ROOT))
    evaluation = EvalConfig.model_validate(build_eval_file(hub, RUN_ROOT, on_gpus=True))
    # A Hub id: the run's copy, pinned by the model stage at the commit `revision` named.
    assert train.target.path == evaluation.target.path == f"{RUN_ROOT}/model"
    assert train.target.revision is None and evaluation.target.revision is None

    example["target"]["model"] = "s3://models/qwen3-8b"
    own = DFlashRunSpec.model_validate(example)
    train = TrainConfig.model_validate(build_train_file(own, RUN_ROOT))
    evaluation = EvalConfig.model_validate(build_eval_file(own, RUN_ROOT, on_gpus=True))
    assert train.target.path == evaluation.target.path == "s3://models/qwen3-8b"
    assert train.target.revision == evaluation.target.revision == "3f2a9c1"


@pytest.mark.parametrize(("block", "gamma"), [(16, 7.0), (10, 5.0), (8, 4.0)])
def test_an_unset_gamma_reaches_the_trainer_as_the_papers_for_the_block_size(
    block: int, gamma: float
) -> None:
    from dflash_trainer.train.anchors import default_gamma

    example = yaml.safe_load((EXAMPLES[0].parent / "qwen3-8b.yaml").read_text())["spec"]
    example["drafter"] = {**example.get("drafter", {}), "blockSize": block}
    example.setdefault("training", {}).pop("lossDecayGamma", None)
    train = TrainConfig.model_validate(
        build_train_file(DFlashRunSpec.model_validate(example), RUN_ROOT)
    )
    assert train.objective.gamma is None
    assert default_gamma(train.drafter.block_size) == gamma
    example["training"]["lossDecayGamma"] = 3.5
    train = TrainConfig.model_validate(
        build_train_file(DFlashRunSpec.model_validate(example), RUN_ROOT)
    )
    assert train.objective.gamma == 3.5


def test_the_training_monitor_judges_the_sampling_the_data_was_generated_with() -> None:
    from dflash_operator.children.commands import REGEN_TOP_K
    from dflash_trainer.data.regenerate.engine import SamplingSpec

    example = yaml.safe_load((EXAMPLES[0].parent / "qwen3-8b.yaml").read_text())["spec"]
    example.setdefault("regeneration", {}).update(temperature=0.7, topP=0.9)
    example["audit"] = {"minSourceSamples": 30, "likelihood": {"monitorEverySteps": 25}}
    train = TrainConfig.model_validate(
        build_train_file(DFlashRunSpec.model_validate(example), RUN_ROOT)
    )
    assert SamplingSpec().top_k == REGEN_TOP_K  # the regenerate stage's own default
    monitor = train.likelihood
    assert (monitor.temperature, monitor.top_p, monitor.top_k) == (0.7, 0.9, REGEN_TOP_K)
    assert monitor.every_steps == 25 and monitor.min_source_rows == 30
    assert monitor.enforce is True
