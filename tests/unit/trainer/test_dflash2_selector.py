"""DFlash2's candidate selector, walk and loss against hand computations on tiny tensors."""

from __future__ import annotations

import math

import torch
from dflash_trainer.model.dflash2_selector import CandidateSelector, top_candidates
from dflash_trainer.model.dflash2_walk import walk_greedy
from dflash_trainer.train.selector_loss import (
    build_selector_candidates,
    build_selector_loss,
    teacher_forced_predecessors,
)

# V = 4, r = 2, H = 2: small enough to compute every score by hand.
PREDECESSORS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]]  # A [V, r]
SUCCESSORS = [[1.0, 2.0], [0.0, 1.0], [-1.0, 0.0], [3.0, 1.0]]  # B [V, r]
PROJECTION = [[1.0, 0.0], [0.0, 2.0]]  # W [r, H]


def hand_selector(top_k: int) -> CandidateSelector:
    selector = CandidateSelector(vocab_size=4, hidden_size=2, rank=2, top_k=top_k)
    with torch.no_grad():
        selector.predecessor_codebook.copy_(torch.tensor(PREDECESSORS))
        selector.successor_codebook.copy_(torch.tensor(SUCCESSORS))
        selector.hidden_projection.weight.copy_(torch.tensor(PROJECTION))
    return selector


def test_candidate_scores_are_unary_plus_the_low_rank_transition_by_hand() -> None:
    selector = hand_selector(top_k=3)
    hidden = torch.tensor([[0.5, 1.0]])  # W h = [0.5, 2]
    unary = torch.tensor([[1.0, 0.25, -1.0]])
    with torch.no_grad():
        scores = selector.score_candidates(
            unary, hidden, torch.tensor([2]), torch.tensor([[0, 3, 1]])
        )
    # A[2] * W h = [0.5, 2]; dotted with B[0], B[3], B[1]: 4.5, 3.5, 2.
    torch.testing.assert_close(scores, torch.tensor([[5.5, 3.75, 1.0]]))


def test_edge_scores_take_the_anchor_first_then_each_previous_candidate() -> None:
    torch.manual_seed(0)
    selector = CandidateSelector(vocab_size=16, hidden_size=8, rank=4, top_k=3)
    hidden = torch.randn(2, 3, 8)
    candidates = torch.randint(0, 16, (2, 3, 3))
    unary = torch.randn(2, 3, 3)
    anchors = torch.tensor([7, 11])
    with torch.no_grad():
        edges = selector.edge_scores(unary, hidden, candidates, anchors)
        for b in range(2):
            for step in range(3):
                for p in range(3):
                    predecessor = anchors[b] if step == 0 else candidates[b, step - 1, p]
                    expected = selector.score_candidates(
                        unary[b, step], hidden[b, step], predecessor, candidates[b, step]
                    )
                    torch.testing.assert_close(edges[b, step, p], expected)


def test_the_greedy_walk_picks_the_best_edge_from_the_previous_pick() -> None:
    candidates = torch.tensor([[[10, 11], [20, 21], [30, 31]]])
    edges = torch.tensor(
        [
            [
                [[0.0, 1.0], [0.0, 1.0]],  # step 0: from the anchor, 11 wins
                [[5.0, 0.0], [0.0, 2.0]],  # step 1: from 10 it would be 20; from 11, 21
                [[0.0, 3.0], [4.0, 0.0]],  # step 2: from 20 it would be 31; from 21, 30
            ]
        ]
    )
    assert walk_greedy(edges, candidates).tolist() == [[11, 21, 30]]


def test_the_walk_over_real_edge_scores_follows_the_chain_of_its_own_picks() -> None:
    torch.manual_seed(1)
    selector = CandidateSelector(vocab_size=32, hidden_size=8, rank=4, top_k=4)
    with torch.no_grad():  # codebooks strong enough that the transition can overturn the unary
        selector.predecessor_codebook.mul_(100.0)
    logits = torch.randn(1, 5, 32)
    hidden = torch.randn(1, 5, 8)
    ids, unary = top_candidates(logits, 4)
    anchor = torch.tensor([3])
    with torch.no_grad():
        tokens = walk_greedy(selector.edge_scores(unary, hidden, ids, anchor), ids)
        previous = anchor[0]
        for step in range(5):
            scores = selector.score_candidates(
                unary[0, step], hidden[0, step], previous, ids[0, step]
            )
            previous = ids[0, step, scores.argmax()]
            assert tokens[0, step] == previous


def test_a_missing_target_replaces_the_weakest_candidate_a_present_one_changes_nothing() -> None:
    candidates = build_selector_candidates(
        torch.tensor([[5, 7, 9], [5, 7, 9]]), torch.tensor([7, 4])
    )
    assert candidates.ids.tolist() == [[5, 7, 9], [5, 7, 4]]
    assert candidates.target_index.tolist() == [1, 2]
    assert candidates.contains_target.tolist() == [True, False]


def test_the_predecessor_of_each_slot_is_the_data_token_of_the_slot_before() -> None:
    tokens = torch.tensor([[10, 11, 12, 13, 20, 21, 22, 23]])
    assert teacher_forced_predecessors(tokens, 4).tolist() == [[10, 10, 11, 12, 20, 20, 21, 22]]


def test_the_selector_loss_is_the_weighted_k_way_cross_entropy_by_hand() -> None:
    selector = hand_selector(top_k=2)
    unary_logits = torch.tensor([[3.0, 1.0, 2.0, 0.0], [0.0, 5.0, 1.0, 4.0]])
    hidden = torch.tensor([[0.5, 1.0], [1.0, -1.0]])
    parts = build_selector_loss(
        selector,
        hidden,
        unary_logits,
        predecessor_ids=torch.tensor([1, 3]),
        target_ids=torch.tensor([2, 0]),
        weights=torch.tensor([1.0, 0.5]),
        normaliser=1.5,
    )
    # Row 0: top-2 [0, 2], target 2 at index 1. A[1] * W h = [0, 2]: transitions 4 and 0,
    # scores [3 + 4, 2 + 0] = [7, 2].
    ce0 = math.log(math.exp(7) + math.exp(2)) - 2
    # Row 1: top-2 [1, 3] misses target 0, injected in place of 3: [1, 0], index 1.
    # A[3] * W h = [2, -1] * [1, -2] = [2, 2]: transitions 2 and 6, scores [5 + 2, 0 + 6].
    ce1 = math.log(math.exp(7) + math.exp(6)) - 6
    torch.testing.assert_close(
        parts.scaled_loss, torch.tensor((ce0 + 0.5 * ce1) / 1.5), rtol=1e-5, atol=1e-6
    )
    assert parts.recall.item() == 1  # only row 0's serving top-2 held its target
    assert parts.correct.item() == 0  # and the selector ranks 0 above it


def test_the_selector_loss_trains_the_injected_targets_successor_row() -> None:
    selector = hand_selector(top_k=2)
    unary_logits = torch.tensor([[0.0, 5.0, 1.0, 4.0]], requires_grad=True)
    parts = build_selector_loss(
        selector,
        torch.tensor([[1.0, -1.0]]),
        unary_logits,
        predecessor_ids=torch.tensor([3]),
        target_ids=torch.tensor([0]),
        weights=torch.tensor([1.0]),
        normaliser=1.0,
    )
    parts.scaled_loss.backward()
    grad = selector.successor_codebook.grad
    assert grad is not None
    assert grad[0].abs().sum() > 0  # the injected target
    assert grad[3].abs().sum() == 0  # the candidate it displaced
    assert unary_logits.grad is not None and unary_logits.grad[0, 0] < 0  # pushed up
