"""The likelihood monitor in the memory plan: the LM-head chunk of `score_positions` counted at
the dispatcher against the plan's bytes per logit, the chunk size shared with the scorer, the
monitor's phase present exactly when the monitor is on, its terms against an independent
count, and turning the monitor off offered as a fix when nothing else fits."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest
import torch
from dflash_memplan.estimate import (
    GIB,
    MONITOR_HEAD_BYTES_PER_LOGIT,
    MONITOR_HEAD_CHUNK_ROWS,
    RankSetup,
    estimate_rank_memory,
)
from dflash_memplan.fixes import SPEC_FIELDS, find_fixes
from dflash_memplan.known import known_target_shape
from dflash_memplan.shapes import build_drafter_shape, target_shape_from_config
from dflash_trainer.data.likelihood.hf_scorer import HEAD_CHUNK_ROWS, score_positions
from dflash_trainer.data.likelihood.rule import SamplingRule
from dflash_trainer.plan.inputs import TRAIN_FIELDS, build_plan_inputs
from dflash_trainer.plan.meter import LiveTensorMeter
from dflash_trainer.train.config import TrainConfig

# The plan's bytes per logit may miss the measured ones by at most 10% either way.
TOLERANCE = 0.10
MONITOR = "likelihood monitor"


def head_bytes_per_logit(dtype: torch.dtype, chunks: int, rows: int = 256) -> float:
    """Peak bytes `score_positions` adds over its inputs, per logit of one chunk."""
    torch.manual_seed(0)
    hidden_size, vocab = 64, 16384
    head = torch.nn.Linear(hidden_size, vocab, bias=False).to(dtype)
    hidden = torch.randn(rows * chunks, hidden_size).to(dtype)
    targets = torch.randint(0, vocab, (rows * chunks,))
    meter = LiveTensorMeter()
    meter.track([hidden, targets, head.weight])
    with meter:
        before = meter.current_bytes
        meter.reset_peak()
        scores = score_positions(hidden, targets, head, SamplingRule(), chunk_rows=rows)
    assert scores.lp.shape == (rows * chunks,)
    return (meter.peak_bytes - before) / (rows * vocab)


@pytest.mark.parametrize("chunks", [1, 3], ids=["one-chunk", "three-chunks"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16-head"])
def test_the_monitors_head_chunk_holds_the_plans_bytes_per_logit(
    dtype: torch.dtype, chunks: int
) -> None:
    """float32 logits, their log-softmax and the rank's comparison: 9 B, and one chunk's
    tensors are freed before the next chunk's exist (12 B in float32, 14 B with a bf16 head
    when two chunks overlapped)."""
    per_logit = head_bytes_per_logit(dtype, chunks)
    print(f"{dtype} x {chunks} chunk(s): {per_logit:.3f} B per logit")

    assert per_logit == pytest.approx(MONITOR_HEAD_BYTES_PER_LOGIT, rel=TOLERANCE), per_logit


def test_the_scorer_chunks_as_the_plan_counts() -> None:
    default = inspect.signature(score_positions).parameters["chunk_rows"].default

    assert HEAD_CHUNK_ROWS == default == MONITOR_HEAD_CHUNK_ROWS == 1024


def qwen36(**setup: Any) -> tuple[Any, Any, RankSetup]:
    """The Qwen3.6-27B example's shapes: batch 4 x 3072, 8 FSDP2 ranks, checkpointing."""
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    drafter = build_drafter_shape(target, num_layers=5, block_size=16)
    base: dict[str, Any] = {"batch_size": 4, "max_seq_len": 3072, "anchors_per_sequence": 512,
                            "loss_chunk_tokens": 1024, "world_size": 8, "strategy": "fsdp2",
                            "activation_checkpointing": True}  # fmt: skip
    return target, drafter, RankSetup(**{**base, **setup})


def terms_of(phase: Any) -> dict[str, int]:
    return {term.name: term.bytes for term in phase.terms}


def test_the_monitor_phase_is_counted_exactly_when_the_monitor_is_on() -> None:
    target, drafter, setup = qwen36()
    assert setup.monitor_every_steps == 10  # the operator's default: on
    on = estimate_rank_memory(target, drafter, setup)
    off = estimate_rank_memory(target, drafter, replace(setup, monitor_every_steps=0))

    assert [p.name for p in on.phases] == [p.name for p in off.phases] + [MONITOR]
    assert on.phases[:-1] == off.phases and on.persistent == off.persistent


def test_the_monitor_phase_against_an_independent_count() -> None:
    """Qwen3.6-27B (hidden 5120, vocab 248,320), batch 4 x 3072, 5 taps, bf16: the numbers
    written out, not taken from the plan's functions."""
    target, drafter, setup = qwen36()
    phase = estimate_rank_memory(target, drafter, setup).phase(MONITOR)

    assert terms_of(phase) == {
        "monitor LM-head chunk": 1024 * 248_320 * 9,  # 2.13 GiB
        "target final hidden states": 4 * 3072 * 5120 * 2,
        "monitored positions": 4 * 3071 * 5120 * 2,
        "tapped features": 5 * 4 * 3072 * 5120 * 2,
    }
    assert round(sum(terms_of(phase).values()) / GIB, 2) == 2.95


def test_a_short_micro_batch_scores_fewer_rows_than_a_chunk() -> None:
    target, drafter, setup = qwen36(batch_size=1, max_seq_len=512)
    phase = estimate_rank_memory(target, drafter, setup).phase(MONITOR)

    assert terms_of(phase)["monitor LM-head chunk"] == 511 * 248_320 * 9


@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
def test_under_accumulation_the_earlier_micro_batches_gradients_are_alive(strategy: str) -> None:
    target, drafter, setup = qwen36(grad_accum=4, batch_size=1, strategy=strategy)
    terms = terms_of(estimate_rank_memory(target, drafter, setup).phase(MONITOR))
    params = drafter.count_params()

    if strategy == "fsdp2":  # unsharded in the float32 reduce dtype until the reduce-scatter
        assert terms["FSDP2 accumulated gradients"] == params * 4
    else:
        assert terms["drafter gradients"] == params * 4
    assert terms["previous block embeddings"] == 1 * 512 * 16 * 5120 * 2
    # No activation, no weight copy: the monitor runs between micro-batches.
    assert not {"activations", "autocast weight copies", "FSDP2 unsharded layers"} & set(terms)


def test_without_accumulation_no_gradient_is_alive_at_the_monitor() -> None:
    target, drafter, setup = qwen36(strategy="ddp", world_size=4)
    terms = terms_of(estimate_rank_memory(target, drafter, setup).phase(MONITOR))

    assert set(terms) == {"monitor LM-head chunk", "target final hidden states",
                          "monitored positions", "tapped features"}  # fmt: skip


def large_vocab_small_drafter() -> tuple[Any, Any, RankSetup]:
    """A 1M-token vocabulary under a one-layer drafter with few anchors: the monitor's chunk
    (1,024 x 1M x 9 B = 8.6 GiB) outweighs the backward."""
    target = target_shape_from_config({
        "model_type": "qwen3", "vocab_size": 1 << 20, "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
    })  # fmt: skip
    drafter = build_drafter_shape(target, num_layers=1, block_size=8)
    setup = RankSetup(batch_size=1, max_seq_len=2048, anchors_per_sequence=16,
                      loss_chunk_tokens=256)  # fmt: skip
    return target, drafter, setup


def test_when_the_monitor_is_the_peak_turning_it_off_is_offered_last() -> None:
    target, drafter, setup = large_vocab_small_drafter()
    estimate = estimate_rank_memory(target, drafter, setup)
    assert estimate.peak_phase == MONITOR
    off = estimate_rank_memory(target, drafter, replace(setup, monitor_every_steps=0))
    capacity = (estimate.total_bytes + off.total_bytes) // 2

    fixes = find_fixes(target, drafter, setup, capacity)
    assert fixes[-1].knob == "monitor_every_steps" and fixes[-1].value == 0
    assert fixes[-1].total_bytes == off.total_bytes
    assert SPEC_FIELDS["monitor_every_steps"] == "spec.audit.likelihood.monitorEverySteps"
    assert TRAIN_FIELDS["monitor_every_steps"] == "likelihood.every_steps"
    # Off, it is never offered.
    assert all(
        f.knob != "monitor_every_steps"
        for f in find_fixes(target, drafter, replace(setup, monitor_every_steps=0), capacity)
    )


@pytest.mark.parametrize("every", [0, 25])
def test_the_plan_of_a_train_yaml_follows_its_likelihood_section(every: int) -> None:
    target, _, _ = qwen36()
    cfg = TrainConfig.model_validate(
        {"run_root": "s3://plan/run", "target": {"path": "Qwen/Qwen3.6-27B"},
         "likelihood": {"every_steps": every}}
    )  # fmt: skip
    inputs = build_plan_inputs(cfg, target, world_size=8)

    assert inputs.setup.monitor_every_steps == every
    estimate = estimate_rank_memory(inputs.target, inputs.drafter, inputs.setup)
    phases = [p.name for p in estimate.phases]
    assert (MONITOR in phases) is (every > 0)
