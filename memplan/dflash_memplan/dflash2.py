"""DFlash2's terms of one rank's peak: the in-block convolutions' activations, the selector's
backward, the top-K inside the LM-head loss chunk and the verifier's argmax, which needs the
target's full forward. What the trainer does is `dflash_trainer/train/{loss,selector_loss,
verifier_targets,step}.py`; the DFlash terms and the phases they join are in `estimate.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_memplan.shapes import DFlash2Shape, DrafterShape, TargetShape
from dflash_memplan.terms import Term

if TYPE_CHECKING:  # estimate.py imports this module
    from dflash_memplan.estimate import RankSetup

# A draft layer has four convolutions: the input and the output side of attention and of the
# MLP (model/dflash2_conv.py).
CONVOLUTIONS_PER_LAYER = 4
# The selector's backward (model/dflash2_selector.py, run first: its loss is the last node of
# the graph), per candidate of a scored row and rank channel, float32: the gathered successor
# rows it keeps, the product's gradient and the successor rows' gradient. Measured at the
# dispatcher: 12.0-12.25 (tests/unit/trainer/test_memory_plan_dflash2.py).
SELECTOR_BACKWARD_BYTES_PER_CANDIDATE = 12
# ... and per scored row and rank channel: the float32 context's gradient.
SELECTOR_BACKWARD_BYTES_PER_ROW_RANK = 4
# Per logit of a DFlash2 loss chunk at its backward: DFlash's 12 B, plus the dense float32
# gradient of the gather that hands the top-K's unary logits to the selector (autograd
# scatters it into a [rows, V] zero tensor). Measured: 16.2 in float32, 16.7 under bf16
# autocast, the codebooks' gradients included (the same test).
SELECTOR_LOSS_BYTES_PER_LOGIT = 16
# Per candidate of every scored row while the loss chunks run backward: the int64 candidate
# ids the selector keeps for its backward, the float32 unary logits' gradient, and the
# recomputed chunk's top-K (float32 values, int64 ids; an upper bound for its rows).
TOP_K_BYTES_PER_CANDIDATE = 8 + 4 + 4
# The verifier's argmax takes the int64 index of each scored row's largest logit.
ARGMAX_BYTES_PER_ROW = 8
# FSDP2: a unit's bf16 gradient and its float32 copy for the reduce-scatter.
UNSHARDED_GRAD_BYTES = 2 + 4
GRAD_BYTES = 4


def count_conv_activation_bytes(
    knobs: DFlash2Shape, hidden_size: int, compute_bytes: int, batch: int, slots: int
) -> int:
    """What one layer's convolutions keep for backward over a micro-batch of `batch` sequences
    of `slots` draft slots: each keeps `2 * taps * H` values per slot (its per-row coefficients
    and what every further tap reads) and, per further tap, a block mask over one sequence's
    slots. Exact at the dispatcher for 1 to 3 taps (the test named above; 1 to 5 when written)."""
    taps = knobs.conv_kernel_size
    per_convolution = 2 * taps * hidden_size * batch * slots + (taps - 1) * slots
    return CONVOLUTIONS_PER_LAYER * per_convolution * compute_bytes


def count_scored_rows(drafter: DrafterShape, setup: RankSetup) -> int:
    """Scored slots of a micro-batch (slot 0 is never scored): the selector's rows."""
    return setup.batch_size * setup.anchors_per_sequence * (drafter.block_size - 1)


def build_top_k_term(drafter: DrafterShape, setup: RankSetup, knobs: DFlash2Shape) -> Term:
    rows = count_scored_rows(drafter, setup)
    return Term(
        "selector top-K",
        rows * knobs.selector_top_k * TOP_K_BYTES_PER_CANDIDATE,
        f"{rows} rows x top-{knobs.selector_top_k} x {TOP_K_BYTES_PER_CANDIDATE} B (candidate "
        "ids, their unary logits' gradient, a chunk's top-K)",
    )


def build_selector_backward_terms(
    drafter: DrafterShape, setup: RankSetup, knobs: DFlash2Shape
) -> list[Term]:
    """The selector's own backward: its `[rows, K, r]` tensors and the codebooks' gradient as
    it is made (under FSDP2 unsharded, before the selector unit's reduce-scatter)."""
    rows = count_scored_rows(drafter, setup)
    k, r = knobs.selector_top_k, knobs.selector_rank
    params = knobs.selector_params(drafter.hidden_size, drafter.vocab_size)
    per_row = r * (k * SELECTOR_BACKWARD_BYTES_PER_CANDIDATE + SELECTOR_BACKWARD_BYTES_PER_ROW_RANK)
    terms = [
        Term(
            "selector candidates",
            rows * per_row,
            f"{rows} rows x rank {r} x (top-{k} x {SELECTOR_BACKWARD_BYTES_PER_CANDIDATE} B + "
            f"{SELECTOR_BACKWARD_BYTES_PER_ROW_RANK} B): the successor rows, their products' "
            "and their own gradients, float32",
        )
    ]
    if setup.sharded:
        terms.append(
            Term(
                "selector unsharded gradient",
                params * UNSHARDED_GRAD_BYTES,
                f"{params / 1e6:.1f}M params (two [{drafter.vocab_size}, {r}] codebooks), bf16 "
                "+ float32 copy for the selector unit's reduce-scatter",
            )
        )
    elif setup.grad_accum == 1:  # with accumulation, estimate.py's kept gradients hold them
        terms.append(_selector_gradient(params, r, drafter.vocab_size, ""))
    return terms


def build_selector_gradient_terms(
    drafter: DrafterShape, setup: RankSetup, knobs: DFlash2Shape
) -> list[Term]:
    """After the selector's backward, while the loss chunks run theirs: its gradient (the
    rank's shard under FSDP2). With accumulation the kept gradients already hold it."""
    if setup.grad_accum > 1:
        return []
    params = knobs.selector_params(drafter.hidden_size, drafter.vocab_size)
    shards = setup.world_size if setup.sharded else 1
    split = f" / {shards} ranks" if shards > 1 else ""
    local = -(-params // shards)
    return [_selector_gradient(local, knobs.selector_rank, drafter.vocab_size, split)]


def _selector_gradient(params: int, rank: int, vocab: int, split: str) -> Term:
    return Term(
        "selector gradients",
        params * GRAD_BYTES,
        f"two [{vocab}, {rank}] codebooks and the projection, float32{split} (the selector's "
        "backward runs before the LM head's)",
    )


def build_verifier_terms(
    target: TargetShape, drafter: DrafterShape, setup: RankSetup, chunk_rows: int
) -> list[Term]:
    """Before the drafter runs (train/step.py `build_selector_term`): the target ran to its
    last layer, and its LM head takes the argmax of every scored row, a chunk at a time, in
    the target's dtype (no autocast, no gradient)."""
    tb, h = setup.target_bytes, target.hidden_size
    tokens = setup.batch_size * setup.max_seq_len
    rows = count_scored_rows(drafter, setup)
    dtype = {2: "bf16", 4: "float32"}.get(tb, f"{tb} B")
    return [
        Term(
            "verifier logits chunk",
            chunk_rows * (target.vocab_size * tb + ARGMAX_BYTES_PER_ROW),
            f"{chunk_rows} rows x {target.vocab_size} vocab in {dtype}, for the verifier's "
            "argmax (the selector's targets)",
        ),
        Term(
            "target final hidden states",
            tokens * h * tb,
            f"batch {setup.batch_size} x {setup.max_seq_len} tokens x {h} in {dtype} (DFlash2 "
            "steps run the target to its last layer)",
        ),
        Term(
            "verifier rows",
            rows * (h * tb + ARGMAX_BYTES_PER_ROW),
            f"the final hidden states of the {rows} scored slots, gathered, and their argmax",
        ),
        Term(
            "tapped features",
            drafter.num_taps * tokens * h * tb,
            f"{drafter.num_taps} taps x batch {setup.batch_size} x {setup.max_seq_len} tokens, "
            "kept for the drafter's forward",
        ),
    ]
