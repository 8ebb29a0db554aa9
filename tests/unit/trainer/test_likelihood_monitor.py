"""The in-training likelihood monitor on a tiny target: its own greedy continuations pass every
monitored step; a source whose answers the target would not write (another model's greedy
answers to the same prompts) stops training within a bounded number of steps, naming the
source and the step, without a checkpoint or an export of the bad run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from dflash_trainer.eval.greedy import build_self_distill_samples
from dflash_trainer.train.__main__ import main
from dflash_trainer.train.config import TrainConfig
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.result import EXIT_MONITOR_STOPPED
from dflash_trainer.train.trainer import Trainer
from dflash_trainer.train.verdict import SUMMARY_LIMIT

from .conftest import TINY_QWEN3, build_tiny_target

ROWS = 48  # per source
PROMPT, ANSWER = 8, 24
EVERY = 2
MIN_ROWS = 8


def own_rows(seed: int, model_seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """A target's greedy continuations of random prompts (`model_seed` 0: the run's target,
    what it would write itself; another seed: another model's answers)."""
    target = build_tiny_target(TINY_QWEN3, seed=model_seed)
    ids, mask = build_self_distill_samples(
        target.model, samples=ROWS, prompt_tokens=PROMPT, answer_tokens=ANSWER,
        vocab_size=TINY_QWEN3["vocab_size"], seed=seed, avoid=511,
    )  # fmt: skip
    return [(row.tolist(), m.tolist()) for row, m in zip(ids, mask.to(torch.int8), strict=True)]


def write(folder: Path, sources: dict[str, list[tuple[list[int], list[int]]]]) -> Path:
    folder.mkdir(parents=True)
    shards = []
    for n, (name, rows) in enumerate(sources.items()):
        table = pa.table(
            {
                "id": [f"{name}-{i}" for i in range(len(rows))],
                "source": [name] * len(rows),
                "input_ids": pa.array([r[0] for r in rows], type=pa.list_(pa.int32())),
                "loss_mask": pa.array([r[1] for r in rows], type=pa.list_(pa.int8())),
            }
        )
        pq.write_table(table, folder / f"shard-{n:05d}.parquet")
        shards.append({"path": f"shard-{n:05d}.parquet", "rows": len(rows)})
    (folder / "_SUCCESS.json").write_text(json.dumps({"shards": shards}))
    return folder


def config(quick_config: Callable[..., dict[str, Any]], tokenized: Path) -> TrainConfig:
    cfg = quick_config(
        data={"tokenized_uri": str(tokenized), "max_seq_len": 64, "batch_size": 8,
              "self_distill": None},
        optim={"lr": 3e-3, "max_steps": 24, "warmup_ratio": 0.0},
        likelihood={"every_steps": EVERY, "temperature": 0.0, "min_source_rows": MIN_ROWS},
    )  # fmt: skip
    cfg["data"].pop("self_distill")
    return TrainConfig.model_validate(cfg)


@pytest.fixture(scope="module")
def good() -> list[tuple[list[int], list[int]]]:
    return own_rows(seed=3)


def test_the_targets_own_answers_pass_every_monitored_step(
    good: list[tuple[list[int], list[int]]],
    quick_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    tokenized = write(tmp_path / "tokenized", {"own": good, "own-too": own_rows(seed=4)})
    trainer = Trainer(config(quick_config, tokenized), init_distributed(timeout_minutes=5))
    result = trainer.run()
    assert result.audit is None and result.step == 24
    assert trainer.monitor is not None
    snapshot = trainer.monitor.snapshot()
    assert snapshot["verdict"] == "pass" and snapshot["offRows"] == 0
    assert snapshot["scoredRows"] == 12 * 8  # 12 monitored steps of 8 rows
    assert set(snapshot["sources"]) == {"own", "own-too"}


def test_another_models_answers_stop_training_naming_the_source_and_the_step(
    good: list[tuple[list[int], list[int]]],
    quick_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    other = own_rows(seed=3, model_seed=7)  # the same prompts, answered by another model
    assert [r[0][:PROMPT] for r in other] == [r[0][:PROMPT] for r in good]
    tokenized = write(tmp_path / "tokenized", {"own": good, "other-model": other})
    cfg = config(quick_config, tokenized)
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    message = tmp_path / "termination-log"

    # Through the entry point: a stop is a distinct non-zero exit, never 0 (a success).
    code = main(["--config", str(config_file), "--termination-log", str(message)])

    assert code == EXIT_MONITOR_STOPPED == 3
    assert len(message.read_bytes()) <= SUMMARY_LIMIT
    audit = json.loads(message.read_text())
    assert audit["gate"] == "training" and audit["verdict"] == "fail" and audit["ok"] is False
    verdict = json.loads(Path(audit["verdictUri"]).read_text())
    assert verdict["violations"][0]["sources"] == ["other-model"]
    assert verdict["step"] == audit["step"]
    (violation,) = audit["violations"]
    assert violation["sources"] == ["other-model"]  # the healthy source is never named
    # Half of each 8-row batch is that source on average: MIN_ROWS of its rows come within a
    # few scored steps, and the bound is met as soon as they are judged.
    assert audit["step"] <= 6 * EVERY and audit["step"] % EVERY == 0
    assert f"by step {audit['step']}" in violation["message"]
    assert not (Path(cfg.run_root) / "final").exists()
    report = json.loads(Path(cfg.likelihood_report_uri, "report.json").read_text())
    assert report["likelihood"]["sources"]["own"]["offRows"] == 0
    assert report["likelihood"]["sources"]["other-model"]["offDistributionRate"] > 0.5

    # The pod restarted in place (OnFailure) runs the trainer again: it never trains on the
    # data the monitor judged bad, and reports the same stop.
    metrics = Path(cfg.logging.metrics_file)
    lines_before = metrics.read_text() if metrics.exists() else ""
    again = tmp_path / "termination-log-2"
    assert main(["--config", str(config_file), "--termination-log", str(again)]) == 3
    repeated = json.loads(again.read_text())
    assert repeated["verdictUri"] == audit["verdictUri"] and repeated["step"] == audit["step"]
    assert repeated["violations"][0]["sources"] == ["other-model"]
    assert (metrics.read_text() if metrics.exists() else "") == lines_before  # no step ran


def test_an_unreadable_earlier_verdict_still_stops_training(
    good: list[tuple[list[int], list[int]]],
    quick_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """Fail closed: a verdict object that exists but cannot be read is a stop, not a pass."""
    tokenized = write(tmp_path / "tokenized", {"own": good})
    cfg = config(quick_config, tokenized)
    config_file = tmp_path / "train.yaml"
    config_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    folder = Path(cfg.likelihood_report_uri)
    folder.mkdir(parents=True)
    (folder / "verdict.json").write_text('{"stage": "train", "ok": fal')  # cut mid-write
    message = tmp_path / "termination-log"
    assert main(["--config", str(config_file), "--termination-log", str(message)]) == 3
    audit = json.loads(message.read_text())
    assert audit["ok"] is False and "cannot be read" in audit["message"]
    assert not (Path(cfg.run_root) / "final").exists()


def test_each_source_is_judged_by_its_declared_sampling_and_an_unknown_one_is_never_passed(
    good: list[tuple[list[int], list[int]]],
    quick_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    # The run's default sampling (T = 1.0, top-p 0.5) is not how "own" was made: it declares
    # its greedy sampling, and passes; "other-model" declares none: unknown, so it is not
    # scored, neither stops training nor counts as passed.
    other = own_rows(seed=3, model_seed=7)
    tokenized = write(tmp_path / "tokenized", {"own": good, "other-model": other})
    raw = config(quick_config, tokenized).model_dump()
    raw["likelihood"] |= {"temperature": 1.0, "top_p": 0.5, "top_k": 0,
                          "sources": {"own": {"temperature": 0.0}, "other-model": None}}  # fmt: skip
    cfg = TrainConfig.model_validate(raw)
    trainer = Trainer(cfg, init_distributed(timeout_minutes=5))
    result = trainer.run()
    assert result.audit is None and result.step == 24
    monitor = trainer.monitor
    assert monitor is not None and monitor.unjudged == ["other-model"]
    snapshot = monitor.snapshot()
    assert snapshot["offRows"] == 0 and set(snapshot["sources"]) == {"own"}


def test_the_monitors_totals_survive_a_resume(
    good: list[tuple[list[int], list[int]]],
    quick_config: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    tokenized = write(tmp_path / "tokenized", {"own": good})
    raw = config(quick_config, tokenized).model_dump()
    raw["optim"]["max_steps"] = 12
    raw["checkpoint"] |= {"every_steps": 12, "resume": True}
    first = Trainer(TrainConfig.model_validate(raw), init_distributed(timeout_minutes=5))
    assert first.run().step == 12
    raw["optim"]["max_steps"] = 24
    resumed = Trainer(TrainConfig.model_validate(raw), init_distributed(timeout_minutes=5))
    assert resumed.run().step == 24
    assert resumed.monitor is not None
    # 12 monitored steps of 8 rows over both runs, not only the 6 after the resume.
    assert resumed.monitor.snapshot()["scoredRows"] == 12 * 8
    assert resumed.monitor.steps_scored == 12
