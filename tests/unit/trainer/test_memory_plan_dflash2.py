"""The memory plan's DFlash2 terms: the convolutions and the selector's codebooks counted as
the trainer builds them (with their gradients and AdamW moments), and the selector's
candidates in the backward."""

from __future__ import annotations

from dflash_memplan.estimate import GIB, RankSetup, estimate_rank_memory
from dflash_memplan.known import known_target_shape
from dflash_memplan.shapes import DFlash2Shape, build_drafter_shape, target_shape_from_config
from dflash_trainer.model.config import DFlash2Settings, build_drafter_config
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.target import TargetParts

from .conftest import TINY_QWEN3

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
    terms = {t.name: t for t in after.phase("backward").terms}
    rows = 512 * 7
    assert terms["selector candidates"].bytes == rows * 16 * 256 * 8
    assert "selector candidates" not in {t.name for t in before.phase("backward").terms}
    assert after.total_bytes > before.total_bytes
