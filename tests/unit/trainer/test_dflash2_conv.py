"""DFlash2's in-block convolution: the identity at init, the formula, no leak across blocks,
the names and shapes vLLM loads, and the typed knobs that leave DFlash configs unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.config import DFlash2Settings, DrafterConfig, DrafterConfigError
from dflash_trainer.model.dflash2_conv import GroupedDynamicConv, grouped_causal_conv
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.drafter import DFlashDrafter

HIDDEN, BLOCK, TAPS, GROUP = 64, 4, 3, 16
KNOBS = DFlash2Settings(
    conv_kernel_size=TAPS, conv_group_size=GROUP, selector_rank=8, selector_top_k=5
)
DFLASH = DrafterConfig(
    hidden_size=HIDDEN,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    num_target_layers=6,
    target_layer_ids=(1, 3),
    mask_token_id=511,
    block_size=BLOCK,
)
DFLASH2 = replace(DFLASH, dflash2=KNOBS)


def randomised(conv: GroupedDynamicConv, seed: int) -> GroupedDynamicConv:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        conv.base_kernel.copy_(torch.randn(conv.base_kernel.shape, generator=gen))
        weight = conv.kernel_projection.weight
        weight.copy_(torch.randn(weight.shape, generator=gen) * 0.1)
    return conv


def drafter_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, BlockLayout]:
    gen = torch.Generator().manual_seed(seed)
    layout = BlockLayout(torch.tensor([[5, 9, 14]]), context_len=18, block_size=BLOCK)
    embeds = torch.randn(1, 3 * BLOCK, HIDDEN, generator=gen)
    features = torch.randn(1, 18, 2 * HIDDEN, generator=gen)
    return embeds, features, layout


def test_a_fresh_convolution_is_the_identity_on_both_sides() -> None:
    conv = GroupedDynamicConv(HIDDEN, TAPS, GROUP, BLOCK)
    x = torch.randn(2, 3 * BLOCK, HIDDEN)
    y, delta = conv.convolve_input(x)
    assert torch.equal(y, x)
    assert torch.equal(conv.convolve_output(2 * x, delta), 2 * x)


def test_the_convolution_follows_its_formula_channel_by_channel() -> None:
    gen = torch.Generator().manual_seed(1)
    n, groups = 2 * BLOCK, HIDDEN // GROUP
    x = torch.randn(n, HIDDEN, generator=gen)
    delta = torch.randn(n, TAPS, groups, generator=gen)
    base = torch.randn(TAPS, HIDDEN, generator=gen)
    expected = torch.zeros(n, HIDDEN)
    for i in range(n):
        for c in range(HIDDEN):
            for t in range(TAPS):
                if i % BLOCK >= t:  # taps never reach into the previous block
                    expected[i, c] += (base[t, c] + delta[i, t, c // GROUP]) * x[i - t, c]
    torch.testing.assert_close(grouped_causal_conv(x, delta, base, BLOCK), expected)


def test_changing_a_token_in_one_block_leaves_the_other_blocks_convolution_unchanged() -> None:
    conv = randomised(GroupedDynamicConv(HIDDEN, TAPS, GROUP, BLOCK), seed=2)
    x = torch.randn(1, 3 * BLOCK, HIDDEN)
    changed = x.clone()
    last = 2 * BLOCK - 1  # the last slot of block 1: the next block's first taps would read it
    changed[0, last] += 1.0
    with torch.no_grad():
        before, after = conv.convolve_input(x)[0], conv.convolve_input(changed)[0]
    assert torch.equal(before[0, :last], after[0, :last])  # earlier slots: the taps are causal
    assert torch.equal(before[0, last + 1 :], after[0, last + 1 :])  # the next blocks
    assert not torch.equal(before[0, last], after[0, last])


def test_changing_a_token_in_one_block_leaves_the_other_blocks_drafts_unchanged() -> None:
    torch.manual_seed(0)
    drafter = DFlash2Drafter(DFLASH2).eval()
    for seed, layer in enumerate(drafter.layers):
        randomised(layer.attention_conv, seed)
        randomised(layer.mlp_conv, seed + 10)
    embeds, features, layout = drafter_inputs(3)
    changed = embeds.clone()
    changed[0, 2 * BLOCK - 1] += 1.0  # the last slot of block 1
    with torch.no_grad():
        before = drafter(embeds, features, layout, backend="dense")
        after = drafter(changed, features, layout, backend="dense")
    assert torch.equal(before[0, :BLOCK], after[0, :BLOCK])
    assert torch.equal(before[0, 2 * BLOCK :], after[0, 2 * BLOCK :])
    assert not torch.equal(before[0, BLOCK : 2 * BLOCK], after[0, BLOCK : 2 * BLOCK])


def test_a_fresh_dflash2_drafter_drafts_exactly_what_dflash_drafts_with_the_same_backbone() -> None:
    torch.manual_seed(0)
    dflash = DFlashDrafter(DFLASH).eval()
    dflash2 = DFlash2Drafter(DFLASH2).eval()
    missing, unexpected = dflash2.load_state_dict(dflash.state_dict(), strict=False)
    assert not unexpected
    assert all(
        ".attention_conv." in k or ".mlp_conv." in k or "candidate_selector" in k for k in missing
    )
    embeds, features, layout = drafter_inputs(4)
    with torch.no_grad():
        assert torch.equal(
            dflash2(embeds, features, layout, backend="dense"),
            dflash(embeds, features, layout, backend="dense"),
        )


def test_the_new_parameters_have_the_names_and_shapes_vllm_loads() -> None:
    shapes = {k: list(v.shape) for k, v in DFlash2Drafter(DFLASH2).state_dict().items()}
    dflash_keys = set(DFlashDrafter(DFLASH).state_dict())
    projection_rows = 2 * TAPS * HIDDEN // GROUP
    expected = {
        f"layers.{i}.{conv}.{name}": shape
        for i in range(2)
        for conv in ("attention_conv", "mlp_conv")
        for name, shape in (
            ("base_kernel", [2, TAPS, HIDDEN]),
            ("kernel_projection.weight", [projection_rows, HIDDEN]),
        )
    }
    expected |= {
        "candidate_selector.predecessor_codebook": [512, 8],
        "candidate_selector.successor_codebook": [512, 8],
        "candidate_selector.hidden_projection.weight": [8, HIDDEN],
    }
    assert {k: v for k, v in shapes.items() if k not in dflash_keys} == expected


def test_a_dflash_config_dict_is_unchanged_and_dflash2_knobs_round_trip() -> None:
    assert "dflash2" not in DFLASH.to_dict()
    assert DrafterConfig.from_dict(DFLASH.to_dict()) == DFLASH
    assert DFLASH2.to_dict()["dflash2"]["selector_top_k"] == 5
    assert DrafterConfig.from_dict(DFLASH2.to_dict()) == DFLASH2
    assert DFlash2Settings() == DFlash2Settings(2, 16, 256, 16, 1.0)  # speculators' defaults


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        (DFlash2Settings(conv_group_size=24), "conv_group_size=24"),
        (DFlash2Settings(conv_kernel_size=BLOCK + 1), "conv_kernel_size=5"),
        (DFlash2Settings(selector_top_k=513), "selector_top_k=513"),
        (DFlash2Settings(selector_rank=0), "selector_rank=0"),
        (DFlash2Settings(selector_loss_weight=-1.0), "selector_loss_weight=-1.0"),
    ],
)
def test_dflash2_knobs_the_drafter_cannot_take_are_refused_naming_the_field(
    knobs: DFlash2Settings, field: str
) -> None:
    with pytest.raises(DrafterConfigError, match=f"drafter.dflash2.{field}"):
        replace(DFLASH, dflash2=knobs)
