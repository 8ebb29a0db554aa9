"""Our DFlash2 drafter against an independent reference written from vLLM 0.34.0's code
(`dflash2_vllm_reference.py`, this test's fixture): same weights by checkpoint name, logits
and edge scores within float32 tolerance, the walk's tokens identical.

The weights are the drafter's state dict (the names vLLM loads); once the export exists, the
export's safetensors should be what the reference reads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch
from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.config import DFlash2Settings, DrafterConfig
from dflash_trainer.model.dflash2_conv import GroupedDynamicConv
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.dflash2_selector import top_candidates
from dflash_trainer.model.dflash2_walk import walk_greedy


def load_reference() -> ModuleType:
    """The fixture module beside this file (tests are not a package: import it by path)."""
    path = Path(__file__).with_name("dflash2_vllm_reference.py")
    spec = importlib.util.spec_from_file_location("dflash2_vllm_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vllm_ref = load_reference()

HIDDEN, VOCAB, BLOCK, TOP_K, MASK = 64, 512, 4, 5, 511
CFG = DrafterConfig(
    hidden_size=HIDDEN,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=VOCAB,
    num_target_layers=6,
    target_layer_ids=(1, 3),
    mask_token_id=MASK,
    block_size=BLOCK,
    dflash2=DFlash2Settings(
        conv_kernel_size=3, conv_group_size=16, selector_rank=8, selector_top_k=TOP_K
    ),
)
REF_CFG = {
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "eps": CFG.rms_norm_eps,
    "theta": CFG.rope_theta,
    "group_size": 16,
    "block_size": BLOCK,
    "top_k": TOP_K,
    "mask_token_id": MASK,
}


def trained_looking_drafter() -> DFlash2Drafter:
    """Every weight away from its init: convolutions off the identity, a selector strong
    enough to overturn the unary ranking, norms off 1."""
    torch.manual_seed(0)
    drafter = DFlash2Drafter(CFG).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in drafter.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("base_kernel"):
                param.add_(noise * 0.3)
            elif "candidate_selector" in name:
                param.copy_(noise * (0.3 if "hidden_projection" in name else 1.0))
            else:
                param.add_(noise * 0.05)
    return drafter


def frozen_target_parts() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return torch.randn(VOCAB, HIDDEN, generator=gen), torch.randn(
        VOCAB, HIDDEN, generator=gen
    ) * 0.1


def our_proposal(
    drafter: DFlash2Drafter,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    anchor_token: int,
    features: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """As the eval will draft one block: anchor = the number of context positions."""
    context_len = features.shape[0]
    block = torch.tensor([[anchor_token] + [MASK] * (BLOCK - 1)])
    layout = BlockLayout(torch.tensor([[context_len]]), context_len=context_len, block_size=BLOCK)
    with torch.no_grad():
        hidden = drafter(embed[block], features[None], layout, backend="dense")[:, 1:]
        logits = hidden @ lm_head.T
        ids, unary = top_candidates(logits, TOP_K)
        edges = drafter.candidate_selector.edge_scores(
            unary, hidden, ids, torch.tensor([anchor_token])
        )
        tokens = walk_greedy(edges, ids)
    return logits[0], edges[0], tokens[0].tolist()


def reference_weights(drafter: DFlash2Drafter) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in drafter.state_dict().items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_drafts_match_the_vllm_reference_logits_edges_and_walk(seed: int) -> None:
    drafter = trained_looking_drafter()
    embed, lm_head = frozen_target_parts()
    gen = torch.Generator().manual_seed(10 + seed)
    features = torch.randn(7 + seed, 2 * HIDDEN, generator=gen)
    anchor_token = int(torch.randint(0, MASK, (), generator=gen))
    ours = our_proposal(drafter, embed, lm_head, anchor_token, features)
    theirs = vllm_ref.propose(
        reference_weights(drafter), REF_CFG, embed, lm_head, anchor_token, features
    )
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-4, atol=1e-3)
    assert ours[2] == theirs[2]


def test_the_parity_is_not_vacuous_the_convolutions_and_the_selector_both_matter() -> None:
    drafter = trained_looking_drafter()
    embed, lm_head = frozen_target_parts()
    gen = torch.Generator().manual_seed(10)
    features = torch.randn(7, 2 * HIDDEN, generator=gen)
    logits, _, tokens = our_proposal(drafter, embed, lm_head, 42, features)
    assert tokens != logits.argmax(-1).tolist()  # the walk overturned the unary ranking
    for module in drafter.modules():
        if isinstance(module, GroupedDynamicConv):
            module.reset_parameters()
    identity_logits = our_proposal(drafter, embed, lm_head, 42, features)[0]
    assert not torch.allclose(identity_logits, logits, atol=1e-2)


def test_blocks_drafted_together_in_training_match_the_reference_drafting_each_alone() -> None:
    drafter = trained_looking_drafter()
    embed, _ = frozen_target_parts()
    gen = torch.Generator().manual_seed(5)
    context_len, anchors = 16, [3, 7, 12]
    features = torch.randn(context_len, 2 * HIDDEN, generator=gen)
    tokens = torch.randint(0, MASK, (context_len,), generator=gen)
    blocks = torch.tensor([[int(tokens[a])] + [MASK] * (BLOCK - 1) for a in anchors]).view(1, -1)
    layout = BlockLayout(torch.tensor([anchors]), context_len=context_len, block_size=BLOCK)
    with torch.no_grad():
        hidden = drafter(embed[blocks], features[None], layout, backend="dense")[0]
    weights = reference_weights(drafter)
    for n, anchor in enumerate(anchors):
        # A block sees the context strictly before its anchor: what serving gives it.
        expected = vllm_ref.draft_hidden(
            weights,
            REF_CFG,
            embed[blocks[0, n * BLOCK : (n + 1) * BLOCK]],
            features[:anchor],
            anchor,
        )
        torch.testing.assert_close(
            hidden[n * BLOCK : (n + 1) * BLOCK], expected, rtol=1e-4, atol=1e-4
        )
