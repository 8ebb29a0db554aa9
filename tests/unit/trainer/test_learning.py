"""Learning end to end: `configs/debug.yaml` trains a drafter on the tiny target's own greedy
continuations; its acceptance is clearly above an untrained drafter's, and speculative
decoding reproduces the target's greedy output token for token with both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from dflash_trainer.eval.config import EvalConfig
from dflash_trainer.eval.evaluate import run_evaluation
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.export import export_drafter, load_exported_drafter
from dflash_trainer.train.config import load_train_config
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.trainer import Trainer

DEBUG = Path(__file__).resolve().parents[3] / "trainer" / "configs" / "debug.yaml"
STEPS = 64


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["dflash", "dflash2"])
def test_a_trained_drafter_beats_an_untrained_one_and_decoding_stays_exact(
    tmp_path: Path, record_property: Callable[[str, object], None], architecture: str
) -> None:
    dflash2 = ["drafter.dflash2={selector_rank: 32, selector_top_k: 8}"]
    cfg = load_train_config(
        DEBUG,
        [
            f"optim.max_steps={STEPS}",
            "data.self_distill.samples=256",
            f"checkpoint.every_steps={STEPS}",
            *(dflash2 if architecture == "dflash2" else []),
        ],
        run_root=str(tmp_path),
    )
    result = Trainer(cfg, init_distributed(5)).run()
    assert result.final_uri == str(tmp_path / "final")

    trained = load_exported_drafter(cfg.export_uri)
    assert isinstance(trained, DFlash2Drafter) == (architecture == "dflash2")
    torch.manual_seed(1)
    untrained_uri = str(tmp_path / "untrained")
    export_drafter(
        type(trained)(trained.config),
        untrained_uri,
        {
            "target": "tiny",
            "targetLayerIds": [1, 3],
            "numLayers": 2,
            "blockSize": 8,
            "data": "none",
            "steps": 0,
            "loss": 0.0,
        },
        dtype="float32",
    )

    def accept(drafter_uri: str) -> tuple[float, int | None]:
        eval_cfg = EvalConfig.model_validate(
            {
                "run_root": str(tmp_path),
                "target": cfg.target.model_dump(),
                "drafter_uri": drafter_uri,
                "max_new_tokens": 32,
                "prompts": {"random": {"prompt_tokens": 16, "seed": 1}, "num_prompts": 8},
            }
        )
        report = run_evaluation(eval_cfg)
        expected = "DFlash2DraftModel" if architecture == "dflash2" else "DFlashDraftModel"
        assert report.to_json(eval_cfg)["architecture"] == expected
        return report.acceptance_length, report.greedy_mismatches

    trained_len, trained_mismatch = accept(cfg.export_uri)
    untrained_len, untrained_mismatch = accept(untrained_uri)
    record_property("acceptance_trained", trained_len)
    record_property("acceptance_untrained", untrained_len)
    summary = f"trained {trained_len:.3f} vs untrained {untrained_len:.3f} after {STEPS} steps"
    print(summary)
    assert untrained_len < 1.1, summary
    assert trained_len > 1.25, summary
    assert trained_mismatch == 0 and untrained_mismatch == 0, summary
