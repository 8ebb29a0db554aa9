"""Greedy speculative decoding reproduces plain greedy decoding (Qwen3 and the Gated-DeltaNet
hybrid), and acceptance is pooled over rounds."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.eval.greedy import greedy_generate
from dflash_trainer.eval.speculative import AcceptanceStats, SpecOutput, speculative_generate
from dflash_trainer.model.config import build_drafter_config
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts


@pytest.mark.parametrize("target_name", ["tiny_qwen3", "tiny_hybrid"])
def test_speculative_output_equals_greedy_output_token_for_token(
    target_name: str, request: pytest.FixtureRequest
) -> None:
    target: TargetParts = request.getfixturevalue(target_name)
    cfg = build_drafter_config(target.config, num_layers=1, block_size=4, mask_token_id=511)
    torch.manual_seed(0)
    drafter = DFlashDrafter(cfg).eval()
    taps = TargetTaps(target, cfg.target_layer_ids)
    for seed in range(2):
        prompt = torch.randint(0, 511, (1, 6), generator=torch.Generator().manual_seed(seed))
        out = speculative_generate(target, taps, drafter, prompt[0].tolist(), 12)
        assert out.tokens == greedy_generate(target.model, prompt, 12)[0, 6:].tolist()
        # The first token comes from the prefill; every later one from a verification round.
        assert sum(out.produced) == 11 and len(out.accepted) == len(out.produced)
    taps.remove()


def untrained_drafter_and_taps(target: TargetParts) -> tuple[DFlashDrafter, TargetTaps]:
    """A 1-layer, block-4 drafter with seeded random weights, and taps on its target layers."""
    cfg = build_drafter_config(target.config, num_layers=1, block_size=4, mask_token_id=511)
    torch.manual_seed(0)
    return DFlashDrafter(cfg).eval(), TargetTaps(target, cfg.target_layer_ids)


def test_acceptance_is_pooled_over_rounds_and_per_position_never_increases() -> None:
    stats = AcceptanceStats(block_size=4)
    stats.add(SpecOutput(tokens=[0] * 7, accepted=[3, 0, 1], produced=[4, 1, 2]))
    stats.add(SpecOutput(tokens=[0] * 1, accepted=[0], produced=[1]))
    assert stats.acceptance_length == pytest.approx(8 / 4)
    assert stats.per_position == pytest.approx([2 / 4, 1 / 4, 1 / 4])


def test_a_stop_token_ends_generation_right_after_it(tiny_qwen3: TargetParts) -> None:
    cfg = build_drafter_config(tiny_qwen3.config, num_layers=1, block_size=4, mask_token_id=511)
    drafter = DFlashDrafter(cfg).eval()
    taps = TargetTaps(tiny_qwen3, cfg.target_layer_ids)
    prompt = [5, 17, 230, 41, 99, 7]
    free = speculative_generate(tiny_qwen3, taps, drafter, prompt, 12).tokens
    stop = free[4]
    stopped = speculative_generate(tiny_qwen3, taps, drafter, prompt, 12, {stop}).tokens
    assert stopped == free[: free.index(stop) + 1]
    taps.remove()


def test_sampled_speculative_decoding_at_a_tiny_temperature_equals_greedy_decoding(
    tiny_qwen3: TargetParts,
) -> None:
    drafter, taps = untrained_drafter_and_taps(tiny_qwen3)
    prompt = torch.randint(0, 511, (1, 6), generator=torch.Generator().manual_seed(3))
    out = speculative_generate(
        tiny_qwen3, taps, drafter, prompt[0].tolist(), 12,
        temperature=1e-4, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert out.tokens == greedy_generate(tiny_qwen3.model, prompt, 12)[0, 6:].tolist()
    taps.remove()


def test_sampled_speculative_decoding_is_reproducible_per_seed_and_varies_across_seeds(
    tiny_qwen3: TargetParts,
) -> None:
    drafter, taps = untrained_drafter_and_taps(tiny_qwen3)
    prompt = [5, 17, 230, 41, 99, 7]

    def run(seed: int) -> list[int]:
        generator = torch.Generator().manual_seed(seed)
        out = speculative_generate(
            tiny_qwen3, taps, drafter, prompt, 16, temperature=1.5, generator=generator
        )
        assert sum(out.produced) == 15 and len(out.tokens) == 16
        return out.tokens

    assert run(1) == run(1)
    assert len({tuple(run(seed)) for seed in range(4)}) > 1
    taps.remove()
