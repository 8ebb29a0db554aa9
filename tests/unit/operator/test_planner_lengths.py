"""regeneration.maxNewTokens against tokenization.maxSeqLen: one Warning event when a run is
admitted whose answers can be generated longer than training keeps; none otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from dflash_operator.pools import parse_pools

from .conftest import POOLS, Sim, run_body, spec_dict

REASON = "GenerationLongerThanTraining"


def warnings_of(spec: dict[str, Any]) -> list[str]:
    world = Sim(run_body(spec=spec), parse_pools(POOLS))
    world.step()
    world.step()
    return [message for reason, message in world.events() if reason == REASON]


def lengths(max_new_tokens: int, max_seq_len: int, thinking: bool = False) -> dict[str, Any]:
    spec = spec_dict()
    spec["target"] = {**spec["target"], "thinking": thinking}
    spec["regeneration"] = {**spec.get("regeneration", {}), "maxNewTokens": max_new_tokens}
    spec["tokenization"] = {**spec.get("tokenization", {}), "maxSeqLen": max_seq_len}
    return spec


def test_answers_longer_than_training_keeps_are_warned_once_with_the_fix() -> None:
    (message,) = warnings_of(lengths(4096, 3072))

    assert "regeneration.maxNewTokens=4096 exceeds tokenization.maxSeqLen=3072" in message
    assert "Lower regeneration.maxNewTokens to at most 3072" in message


def test_with_thinking_the_warning_says_it_can_be_intended() -> None:
    (message,) = warnings_of(lengths(8192, 3072, thinking=True))

    assert "can be intended" in message


@pytest.mark.parametrize(("max_new_tokens", "max_seq_len"), [(3072, 3072), (1024, 4096)])
def test_generation_that_training_can_keep_is_not_warned(
    max_new_tokens: int, max_seq_len: int
) -> None:
    assert warnings_of(lengths(max_new_tokens, max_seq_len)) == []


def test_the_defaults_agree() -> None:
    assert warnings_of(spec_dict()) == []
