"""The memory plan's DFlash2 terms: the convolutions and the selector's codebooks counted as
the trainer builds them (with their gradients and AdamW moments); each DFlash2 allocation of a
step (the convolutions' activations, the selector's backward, the top-K inside the loss chunk,
the verifier's argmax) counted at the dispatcher against the plan's bytes; the target's final
hidden states freed before the drafter runs. Whole steps against the plan:
test_memory_plan_measured.py."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import numpy as np
import pytest
import torch
from dflash_memplan import dflash2
from dflash_memplan.estimate import GIB, RankSetup, estimate_rank_memory
from dflash_memplan.known import known_target_shape
from dflash_memplan.shapes import DFlash2Shape, build_drafter_shape, target_shape_from_config
from dflash_trainer.model.config import DFlash2Settings, build_drafter_config
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.dflash2_selector import CandidateSelector
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts
from dflash_trainer.plan.meter import LiveTensorMeter
from dflash_trainer.train.batches import build_rows
from dflash_trainer.train.distributed import DistEnv
from dflash_trainer.train.loss import SelectorTerm, build_block_loss
from dflash_trainer.train.step import ObjectiveSettings, build_micro_batch, run_train_step
from dflash_trainer.train.verifier_targets import build_verifier_argmax

from .conftest import TINY_QWEN3

# A dispatcher count may miss the plan's bytes by at most 5% either way.
TOLERANCE = 0.05
KNOBS = DFlash2Shape(conv_kernel_size=3, conv_group_size=16, selector_rank=8, selector_top_k=4)


def test_the_planned_dflash2_parameters_are_the_ones_the_trainer_builds(
    tiny_qwen3: TargetParts,
) -> None:
    target = target_shape_from_config(TINY_QWEN3)
    shape = build_drafter_shape(target, num_layers=2, block_size=8, dflash2=KNOBS)
    cfg = build_drafter_config(
        tiny_qwen3.config, num_layers=2, block_size=8,
        dflash2=DFlash2Settings(conv_kernel_size=3, conv_group_size=16, selector_rank=8,
                                selector_top_k=4),
    )  # fmt: skip
    assert shape.count_params() == sum(p.numel() for p in DFlash2Drafter(cfg).parameters())


def test_the_codebooks_of_a_248k_vocabulary_cost_about_2_gib_with_their_optimizer_state() -> None:
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    plain = build_drafter_shape(target, num_layers=5, block_size=8)
    dflash2 = build_drafter_shape(target, num_layers=5, block_size=8, dflash2=DFlash2Shape())
    setup = RankSetup(batch_size=1, max_seq_len=3072, anchors_per_sequence=512,
                      loss_chunk_tokens=1024, world_size=1, strategy="fsdp2")  # fmt: skip
    extra = dflash2.count_params() - plain.count_params()
    codebooks = 2 * target.vocab_size * 256
    h = target.hidden_size
    # Per layer two modules of base_kernel [2, 2, H] + kernel_projection [2*2*H/16, H].
    convolutions = 5 * 2 * (2 * 2 * h + 2 * 2 * (h // 16) * h)
    assert extra == codebooks + 256 * h + convolutions
    # weights + gradients + AdamW moments, float32: 16 B per parameter.
    assert 1.8 < codebooks * 16 / GIB < 2.1
    before = estimate_rank_memory(target, plain, setup)
    after = estimate_rank_memory(target, dflash2, setup)
    terms = {t.name: t for t in after.phase("selector backward").terms}
    rows = 512 * 7
    assert terms["selector candidates"].bytes == rows * 256 * (16 * 12 + 4)
    assert [p.name for p in before.phases] == ["backward", "optimizer step", "likelihood monitor"]
    assert [p.name for p in after.phases] == [
        "selector backward", "backward", "optimizer step", "likelihood monitor",
        "verifier argmax",
    ]  # fmt: skip
    assert after.total_bytes > before.total_bytes


def test_the_selectors_backward_holds_the_plans_bytes() -> None:
    """The selector's `[rows, K, r]` tensors and its gradients at the peak of its backward."""
    torch.manual_seed(0)
    anchors, top_k, rank, vocab, hidden_size = 64, 16, 64, 1024, 64
    rows = anchors * 7  # block 8: slots 1-7 of each block are scored
    selector = CandidateSelector(vocab, hidden_size, rank, top_k)
    hidden = torch.randn(rows, hidden_size, requires_grad=True)
    predecessors = torch.randint(0, vocab, (rows,))
    candidates = torch.randint(0, vocab, (rows, top_k))
    unary = torch.randn(rows, top_k, requires_grad=True)
    meter = LiveTensorMeter()
    meter.track([*selector.parameters(), hidden, predecessors, candidates, unary])
    with meter:
        before = meter.current_bytes
        scores = unary + selector(hidden, predecessors, candidates)
        loss = torch.nn.functional.cross_entropy(scores, torch.zeros(rows, dtype=torch.long))
        loss.backward()  # type: ignore[no-untyped-call]
    measured = meter.peak_bytes - before
    drafter = build_drafter_shape(
        target_shape_from_config({**TINY_QWEN3, "vocab_size": vocab}), num_layers=1,
        block_size=8, dflash2=DFlash2Shape(selector_rank=rank, selector_top_k=top_k),
    )  # fmt: skip
    setup = RankSetup(batch_size=1, max_seq_len=1024, anchors_per_sequence=anchors,
                      loss_chunk_tokens=1024, device="cpu")  # fmt: skip
    knobs = DFlash2Shape(selector_rank=rank, selector_top_k=top_k)
    planned = sum(t.bytes for t in dflash2.build_selector_backward_terms(drafter, setup, knobs))
    print(f"selector backward: measured {measured}, planned {planned}")
    assert measured == pytest.approx(planned, rel=TOLERANCE)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_a_dflash2_loss_chunk_holds_the_plans_bytes_per_logit(autocast: bool) -> None:
    """The top-K inside the chunk costs the dense gradient of its gather: 16 B per logit
    where DFlash's chunk holds 12 (besides the selector's gradients, made before it)."""
    torch.manual_seed(0)
    rows, hidden_size, vocab, rank = 256, 64, 16384, 8
    hidden = torch.randn(1, rows, hidden_size, requires_grad=True)
    weight = torch.randn(vocab, hidden_size) * 0.02
    labels = torch.randint(0, vocab, (1, rows))
    weights = torch.ones(1, rows)
    selector = CandidateSelector(vocab, hidden_size, rank, 16)
    term = SelectorTerm(selector, torch.randint(0, vocab, (1, rows)),
                        torch.randint(0, vocab, (1, rows)), 1.0)  # fmt: skip
    meter = LiveTensorMeter()
    meter.track([hidden, weight, labels, weights, *selector.parameters(), term.predecessor_ids,
                 term.target_ids])  # fmt: skip
    mixed = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with meter:
        with mixed:
            parts = build_block_loss(hidden, weight, labels, weights, block_size=16,
                                     normaliser=1.0, chunk_tokens=rows, selector_term=term)  # fmt: skip
        before = meter.current_bytes
        meter.reset_peak()
        parts.scaled_loss.backward()  # type: ignore[no-untyped-call]
    gradients = sum(p.numel() for p in selector.parameters()) * 4
    per_logit = (meter.peak_bytes - before - gradients) / (rows * vocab)
    print(f"DFlash2 loss chunk: {per_logit:.3f} B per logit")
    assert per_logit == pytest.approx(dflash2.SELECTOR_LOSS_BYTES_PER_LOGIT, rel=TOLERANCE)


def test_the_verifier_argmax_holds_one_chunk_of_logits_in_the_targets_dtype() -> None:
    torch.manual_seed(0)
    batch, seq, hidden_size, vocab, anchors, block, chunk = 2, 512, 64, 16384, 16, 8, 128
    final_hidden = torch.randn(batch, seq, hidden_size)
    weight = torch.randn(vocab, hidden_size)
    starts = torch.sort(torch.randint(1, seq - block, (batch, anchors))).values
    labels = torch.randint(0, vocab, (batch, anchors * block))
    weights = torch.ones(batch, anchors, block)
    weights[:, :, 0] = 0  # slot 0 is never scored
    weights = weights.reshape(batch, -1)
    meter = LiveTensorMeter()
    meter.track([final_hidden, weight, starts, labels, weights])
    with meter:
        before = meter.current_bytes
        targets = build_verifier_argmax(final_hidden, weight, starts, labels, weights,
                                        block_size=block, chunk_tokens=chunk)  # fmt: skip
        measured = meter.peak_bytes - before - targets.numel() * 8
    target = target_shape_from_config({**TINY_QWEN3, "vocab_size": vocab,
                                       "hidden_size": hidden_size})  # fmt: skip
    drafter = build_drafter_shape(target, num_layers=1, block_size=block,
                                  dflash2=DFlash2Shape())  # fmt: skip
    setup = RankSetup(batch_size=batch, max_seq_len=seq, anchors_per_sequence=anchors,
                      loss_chunk_tokens=chunk, device="cpu", target_bytes=4)  # fmt: skip
    terms = {t.name: t.bytes for t in dflash2.build_verifier_terms(target, drafter, setup, chunk)}
    planned = terms["verifier logits chunk"] + terms["verifier rows"]
    print(f"verifier argmax: measured {measured}, planned {planned}")
    assert measured == pytest.approx(planned, rel=TOLERANCE)


def drafter_pair(target: TargetParts, taps: int) -> tuple[Any, DFlashDrafter, DFlash2Drafter]:
    knobs = DFlash2Settings(conv_kernel_size=taps, conv_group_size=16, selector_rank=8,
                            selector_top_k=4)  # fmt: skip
    plain = build_drafter_config(target.config, num_layers=2, block_size=8)
    cfg = build_drafter_config(target.config, num_layers=2, block_size=8, dflash2=knobs)
    torch.manual_seed(0)
    return cfg, DFlashDrafter(plain), DFlash2Drafter(cfg)


def saved_bytes(drafter: DFlashDrafter, target: TargetParts, cfg: Any) -> int:
    """What the drafter's forward keeps for backward, on a micro-batch of its own (a layout
    caches its attention mask on first use)."""
    settings = ObjectiveSettings(block_size=8, mask_token_id=511, gamma=4.0,
                                 anchors_per_sequence=8, max_seq_len=128, loss_chunk_tokens=64,
                                 backend="dense", chunk_queries=256, seed=0)  # fmt: skip
    ids = torch.randint(0, 511, (2, 128), generator=torch.Generator().manual_seed(0))
    micro = build_micro_batch(build_rows(ids, torch.ones_like(ids, dtype=torch.int8), prefix="c"),
                              np.arange(2), 0, settings, torch.device("cpu"))  # fmt: skip
    features = TargetTaps(target, cfg.target_layer_ids).features(micro.input_ids)
    embeds = target.embed(micro.draft.block_ids)
    meter = LiveTensorMeter()
    meter.track([*drafter.parameters(), *drafter.buffers(), features, embeds])
    with meter:
        before = meter.current_bytes
        hidden = drafter(embeds, features, micro.draft.layout, backend="dense")
        kept = meter.current_bytes - before
    del hidden
    return kept


@pytest.mark.parametrize("taps", [1, 2, 3])
def test_the_convolutions_keep_what_the_plan_counts(tiny_qwen3: TargetParts, taps: int) -> None:
    """What a DFlash2 drafter's forward keeps for backward beyond DFlash's."""
    cfg, plain, with_convolutions = drafter_pair(tiny_qwen3, taps)
    extra = saved_bytes(with_convolutions, tiny_qwen3, cfg) - saved_bytes(plain, tiny_qwen3, cfg)
    per_layer = dflash2.count_conv_activation_bytes(
        DFlash2Shape(conv_kernel_size=taps), TINY_QWEN3["hidden_size"], 4, batch=2, slots=8 * 8
    )
    # 2 layers of batch 2 x 8 anchors x block 8; exact on torch 2.15, within 2% allowed for
    # the version floor's torch 2.11 (make test-version-floor).
    assert extra == pytest.approx(2 * per_layer, rel=0.02)


def test_the_targets_final_hidden_states_are_freed_before_the_drafter_runs(
    tiny_qwen3: TargetParts,
) -> None:
    """A DFlash2 step runs the target to its end for the verifier's argmax; the plan counts
    its final hidden states only until the drafter's forward, so they must be gone by then."""
    knobs = DFlash2Settings(selector_rank=8, selector_top_k=4)
    cfg = build_drafter_config(tiny_qwen3.config, num_layers=1, block_size=8, dflash2=knobs)
    drafter = DFlash2Drafter(cfg)
    taps = TargetTaps(tiny_qwen3, cfg.target_layer_ids)
    finals: list[weakref.ref[torch.Tensor]] = []
    alive_at_forward: list[bool] = []
    full_forward = taps.features_and_hidden

    def recorded(input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, final = full_forward(input_ids)
        finals.append(weakref.ref(final))
        return features, final

    taps.features_and_hidden = recorded  # type: ignore[method-assign]
    drafter.register_forward_pre_hook(lambda *_: alive_at_forward.append(finals[-1]() is not None))
    settings = ObjectiveSettings(block_size=8, mask_token_id=511, gamma=4.0,
                                 anchors_per_sequence=8, max_seq_len=64, loss_chunk_tokens=64,
                                 backend="dense", chunk_queries=256, seed=0,
                                 selector_loss_weight=1.0)  # fmt: skip
    ids = torch.randint(0, 511, (2, 64), generator=torch.Generator().manual_seed(0))
    micro = build_micro_batch(build_rows(ids, torch.ones_like(ids, dtype=torch.int8), prefix="f"),
                              np.arange(2), 0, settings, torch.device("cpu"))  # fmt: skip
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=1e-3)
    run_train_step(
        model=drafter, target=tiny_qwen3, taps=taps, micro_batches=[micro, micro],
        optimizer=optimizer, scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1),
        settings=settings, grad_clip=1.0,
        env=DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu")),
    )  # fmt: skip
    assert len(finals) == 2 and alive_at_forward == [False, False]


def test_dflash2_steps_count_the_verifier_phase_and_more_than_dflash() -> None:
    """The Qwen3.6-27B shapes, 8 FSDP2 ranks: every DFlash2 term written out."""
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    drafter = build_drafter_shape(target, num_layers=5, block_size=8, dflash2=DFlash2Shape())
    setup = RankSetup(batch_size=4, max_seq_len=3072, anchors_per_sequence=512,
                      loss_chunk_tokens=1024, world_size=8, strategy="fsdp2",
                      activation_checkpointing=True)  # fmt: skip
    estimate = estimate_rank_memory(target, drafter, setup)
    verifier = {t.name: t.bytes for t in estimate.phase("verifier argmax").terms}
    rows, h, vocab = 4 * 512 * 7, 5120, 248_320
    assert verifier == {
        "verifier logits chunk": 1024 * (vocab * 2 + 8),
        "target final hidden states": 4 * 3072 * h * 2,
        "verifier rows": rows * (h * 2 + 8),
        "tapped features": 5 * 4 * 3072 * h * 2,
    }
    own = {t.name: t.bytes for t in estimate.phase("selector backward").terms}
    selector_params = 2 * vocab * 256 + 256 * h
    assert own["selector unsharded gradient"] == selector_params * 6
    assert own["selector top-K"] == rows * 16 * 16
    chunk = {t.name: t.bytes for t in estimate.phase("backward").terms}
    assert chunk["LM-head loss chunk"] == 1024 * vocab * 16
    assert chunk["selector gradients"] == -(-selector_params // 8) * 4
