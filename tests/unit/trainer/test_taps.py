"""Target taps keep only the tapped layers' outputs, with the right layer offset."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.model.config import build_target_layer_ids
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts


@pytest.mark.parametrize("target_name", ["tiny_qwen3", "tiny_hybrid"])
def test_layer_id_i_is_the_output_of_layer_i_which_is_hf_hidden_states_i_plus_1(
    target_name: str, request: pytest.FixtureRequest
) -> None:
    target: TargetParts = request.getfixturevalue(target_name)
    taps = TargetTaps(target, [0, 2])
    ids = torch.randint(0, 500, (2, 12), generator=torch.Generator().manual_seed(0))
    hidden = target.model(input_ids=ids, output_hidden_states=True).hidden_states
    expected = torch.cat([hidden[1], hidden[3]], dim=-1)
    torch.testing.assert_close(taps.features(ids), expected, atol=0, rtol=0)
    taps.remove()


def test_the_forward_stops_after_the_last_tap_and_keeps_nothing_else(
    tiny_qwen3: TargetParts,
) -> None:
    calls: list[int] = []
    handles = [
        layer.register_forward_hook(lambda *_a, i=i: calls.append(i))
        for i, layer in enumerate(tiny_qwen3.layers)
    ]
    taps = TargetTaps(tiny_qwen3, [1, 3])
    features = taps.features(torch.randint(0, 500, (1, 8)))
    assert calls == [0, 1, 2, 3]  # layers 4 and 5, the final norm and the LM head never ran
    assert features.shape == (1, 8, 2 * 64)
    assert taps._captured == {}
    taps.remove()
    for handle in handles:
        handle.remove()


@pytest.mark.parametrize("target_name", ["tiny_qwen3", "tiny_hybrid"])
def test_right_padding_does_not_change_a_samples_features(
    target_name: str, request: pytest.FixtureRequest
) -> None:
    target: TargetParts = request.getfixturevalue(target_name)
    taps = TargetTaps(target, [1, 2])
    ids = torch.randint(1, 500, (1, 10), generator=torch.Generator().manual_seed(1))
    padded = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    torch.testing.assert_close(
        taps.features(padded)[:, :10], taps.features(ids), atol=1e-5, rtol=1e-5
    )
    taps.remove()


def test_default_taps_match_the_published_drafters() -> None:
    assert build_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # Qwen3-8B
    assert build_target_layer_ids(64, 5) == (1, 16, 31, 46, 61)  # Qwen3.5/3.6-27B
    assert build_target_layer_ids(40, 5) == (1, 10, 19, 28, 37)  # Qwen3.5-35B-A3B
    assert build_target_layer_ids(6, 2) == (1, 3)  # the tiny calibration target
    assert build_target_layer_ids(36, 1) == (18,)


def test_a_tap_outside_the_target_is_a_clear_error(tiny_qwen3: TargetParts) -> None:
    with pytest.raises(ValueError, match=r"target_layer_ids contains \[6\]; accepted: 0\.\.5"):
        TargetTaps(tiny_qwen3, [1, 6])
