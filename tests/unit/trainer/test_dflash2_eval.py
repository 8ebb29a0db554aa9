"""DFlash2 in the acceptance eval: the selector's walk proposes (greedy and Gumbel-sampled),
its K-candidate distribution is the draft distribution, and verification keeps the output
the target's own."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.eval.greedy import greedy_generate
from dflash_trainer.eval.speculative import propose_with_selector, speculative_generate
from dflash_trainer.model.config import DFlash2Settings, build_drafter_config
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.dflash2_selector import CandidateSelector, top_candidates
from dflash_trainer.model.dflash2_walk import walk_greedy, walk_sampled
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts

KNOBS = DFlash2Settings(selector_rank=8, selector_top_k=4)


def strong_selector(seed: int = 0) -> CandidateSelector:
    """Codebooks large enough that the transition term overturns the unary ranking."""
    torch.manual_seed(seed)
    selector = CandidateSelector(vocab_size=64, hidden_size=8, rank=4, top_k=4)
    with torch.no_grad():
        for param in selector.parameters():
            param.normal_(std=1.5)
    return selector


def test_the_greedy_proposal_is_the_walk_over_the_top_k_not_the_unary_argmax() -> None:
    selector = strong_selector()
    gen = torch.Generator().manual_seed(1)
    hidden, logits = torch.randn(3, 8, generator=gen), torch.randn(3, 64, generator=gen)
    tokens, q = propose_with_selector(selector, hidden, logits, 7, 0.0, None)
    ids, unary = top_candidates(logits, 4)
    with torch.no_grad():
        edges = selector.edge_scores(unary[None], hidden[None], ids[None], torch.tensor([7]))
    assert tokens == walk_greedy(edges, ids[None])[0].tolist()
    assert tokens != logits.argmax(-1).tolist()
    # The draft distribution lives on each step's K candidates and sums to one.
    torch.testing.assert_close(q.sum(-1), torch.ones(3))
    for step in range(3):
        assert set(q[step].nonzero().flatten().tolist()) <= set(ids[step].tolist())


def test_the_gumbel_walk_samples_each_step_from_the_softmax_of_its_row_over_temperature() -> None:
    edges = torch.tensor([[[[2.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]])
    ids = torch.tensor([[[10, 11, 12]]])
    gen = torch.Generator().manual_seed(0)
    draws = 20_000
    counts = torch.zeros(3)
    for _ in range(draws // 1000):
        batch_edges, batch_ids = edges.expand(1000, -1, -1, -1), ids.expand(1000, -1, -1)
        tokens, log_probs = walk_sampled(batch_edges, batch_ids, 0.5, gen)
        counts += torch.bincount(tokens[:, 0] - 10, minlength=3).float()
    expected = torch.softmax(torch.tensor([2.0, 1.0, 0.0]) / 0.5, dim=-1)
    torch.testing.assert_close(counts / draws, expected, atol=0.01, rtol=0)
    torch.testing.assert_close(log_probs[0, 0].exp(), expected)


def test_the_gumbel_walk_follows_its_own_picks_and_at_a_tiny_temperature_is_greedy() -> None:
    selector = strong_selector(3)
    gen = torch.Generator().manual_seed(2)
    ids, unary = top_candidates(torch.randn(2, 5, 64, generator=gen), 4)
    with torch.no_grad():
        edges = selector.edge_scores(unary, torch.randn(2, 5, 8, generator=gen), ids,
                                     torch.tensor([1, 2]))  # fmt: skip
    cold, _ = walk_sampled(edges, ids, 1e-6, torch.Generator().manual_seed(0))
    assert torch.equal(cold, walk_greedy(edges, ids))
    hot, log_probs = walk_sampled(edges, ids, 2.0, torch.Generator().manual_seed(0))
    for b in range(2):
        for step in range(1, 5):
            previous = ids[b, step - 1].tolist().index(int(hot[b, step - 1]))
            expected = torch.log_softmax(edges[b, step, previous] / 2.0, dim=-1)
            torch.testing.assert_close(log_probs[b, step], expected)


def dflash2_drafter_and_taps(target: TargetParts) -> tuple[DFlash2Drafter, TargetTaps]:
    cfg = build_drafter_config(
        target.config, num_layers=1, block_size=4, mask_token_id=511, dflash2=KNOBS
    )
    torch.manual_seed(0)
    drafter = DFlash2Drafter(cfg).eval()
    with torch.no_grad():
        for param in drafter.candidate_selector.parameters():
            param.normal_(std=1.0)
    return drafter, TargetTaps(target, cfg.target_layer_ids)


@pytest.mark.parametrize("temperature", [0.0, 1e-4])
def test_dflash2_speculative_decoding_reproduces_greedy_decoding(
    tiny_qwen3: TargetParts, temperature: float
) -> None:
    drafter, taps = dflash2_drafter_and_taps(tiny_qwen3)
    prompt = torch.randint(0, 511, (1, 6), generator=torch.Generator().manual_seed(4))
    out = speculative_generate(
        tiny_qwen3, taps, drafter, prompt[0].tolist(), 12,
        temperature=temperature, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert out.tokens == greedy_generate(tiny_qwen3.model, prompt, 12)[0, 6:].tolist()
    assert sum(out.produced) == 11
    taps.remove()


def test_dflash2_sampled_decoding_is_reproducible_per_seed(tiny_qwen3: TargetParts) -> None:
    drafter, taps = dflash2_drafter_and_taps(tiny_qwen3)

    def run(seed: int) -> list[int]:
        out = speculative_generate(
            tiny_qwen3, taps, drafter, [5, 17, 230, 41], 12, temperature=0.6,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip
        assert sum(out.produced) == 11
        return out.tokens

    assert run(1) == run(1)
    taps.remove()
