"""One training rank's peak memory, term by term, under the trainer's real strategy.

What the trainer does (dflash_trainer/train/): the frozen target is replicated on every rank
in its dtype; the drafter keeps float32 parameters (the master weights), float32 gradients and
AdamW's two float32 moments; on GPU it runs under bf16 autocast. DDP adds a float32 gradient
bucket per parameter and autocast's bf16 weight copies; FSDP2 shards parameters, gradients
and moments over the ranks and all-gathers bf16 layers one or two at a time. Activations are
what autograd keeps for backward (model/drafter.py, model/block_attention.py), and the LM-head
loss recomputes each chunk's logits in backward (train/loss.py). On the likelihood monitor's
steps the target runs to its last layer and its LM head scores the supervised tokens in chunks
(train/likelihood_monitor.py). docs/memory-plan.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from dflash_memplan import dflash2
from dflash_memplan.allocator import fragmentation_share
from dflash_memplan.shapes import DrafterShape, TargetShape
from dflash_memplan.terms import Phase, Term

GIB = 1 << 30
Strategy = Literal["ddp", "fsdp2"]
Device = Literal["cuda", "cpu"]

# float32 master weights, gradients and AdamW moments (exp_avg, exp_avg_sq).
PARAM_BYTES = 4
GRAD_BYTES = 4
ADAM_STATE_BYTES = 8
# DDP's reducer copies every gradient into float32 buckets (gradient_as_bucket_view=False).
DDP_BUCKET_BYTES = 4
# bf16 weight copies autocast makes for the forward and autograd keeps for backward.
AUTOCAST_WEIGHT_BYTES = 2
# RMSNorm (model/drafter.py) keeps its input and its normalised value in float32 for backward.
NORM_SAVED_BYTES = 8
# Per logit of one loss chunk at its backward: the float32 log-softmax kept by
# cross_entropy, its gradient, and the logits' gradient (train/loss.py recomputes the chunk).
# Measured at the dispatcher: 12.0 in float32, 12.1 under bf16 autocast
# (tests/unit/trainer/test_memory_plan_measured.py; docs/memory-plan.md).
LOSS_BYTES_PER_LOGIT = 12
# The likelihood monitor's LM-head chunk (data/likelihood/hf_scorer.py uses this constant):
# rows of supervised positions scored at once.
MONITOR_HEAD_CHUNK_ROWS = 1024
# Per logit of that chunk at its peak: the float32 logits, their log-softmax and the boolean
# comparison that ranks the token (a bf16 head's own logits are freed by the float32 copy).
# Measured at the dispatcher: 9.0 in float32 and in bf16, one chunk or many
# (tests/unit/trainer/test_memory_plan_monitor.py; docs/memory-plan.md).
MONITOR_HEAD_BYTES_PER_LOGIT = 9
# Log-sum-exp per query and head that flash/flex attention keeps (float32).
ATTENTION_LSE_BYTES = 4
# The float32 attention mask CPU SDPA keeps per layer (dense kernel; validation only).
CPU_DENSE_MASK_BYTES = 4
# FSDP2 holds the bf16 layer it computes and the one it prefetches, and one layer's bf16
# gradient plus its float32 copy for the reduce-scatter.
FSDP_GATHERED_LAYERS = 2
FSDP_UNSHARDED_GRAD_BYTES = 2 + 4
# Workspace outside tensors: the CUDA context and kernel images (~0.5-1 GiB on Hopper and
# Blackwell), NCCL communicator buffers (~0.5 GiB), cuBLAS workspaces and compiled flex
# kernels: 2 GiB; and the caching allocator's fragmentation, a share of the tensor peak that
# depends on its setting (allocator.py: 5% with expandable segments, 15% without).
WORKSPACE_FIXED_BYTES = 2 * GIB
# Bytes per element of FSDP2's reduce dtype (train.yaml distributed.reduce_dtype).
REDUCE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# Default loss chunk: about 2^28 logits per chunk (3 GiB at 12 B), in rows of 128.
LOSS_CHUNK_LOGITS = 1 << 28
LOSS_CHUNK_ROW_MULTIPLE = 128


def default_loss_chunk_tokens(vocab_size: int) -> int:
    """Rows per LM-head chunk sized by the vocabulary: ~2^28 logits, a multiple of 128
    (1,664 rows for Qwen3's 151,936 tokens, 1,024 for Qwen3.5's 248,320)."""
    rows = LOSS_CHUNK_LOGITS // vocab_size
    return max(LOSS_CHUNK_ROW_MULTIPLE, rows // LOSS_CHUNK_ROW_MULTIPLE * LOSS_CHUNK_ROW_MULTIPLE)


@dataclass(frozen=True)
class RankSetup:
    """What one rank trains: the manifest's batch and objective, and how it is distributed."""

    batch_size: int
    max_seq_len: int
    anchors_per_sequence: int
    loss_chunk_tokens: int
    grad_accum: int = 1
    world_size: int = 1
    strategy: Strategy = "ddp"
    device: Device = "cuda"
    # The target's dtype in bytes (bf16 on GPU; `auto` is float32 on CPU).
    target_bytes: int = 2
    # drafter.activation_checkpointing: keep each layer's input, recompute it in backward.
    activation_checkpointing: bool = False
    # FSDP2's reduce dtype in bytes: gradients accumulate unsharded in it between micro-batches.
    reduce_bytes: int = 4
    # PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True (trainer pods get it by default).
    expandable_segments: bool = True
    # The likelihood monitor scores every Nth step (spec.audit.likelihood.monitorEverySteps,
    # train.yaml likelihood.every_steps; 0: off). The operator's default is on, every 10.
    monitor_every_steps: int = 10

    @property
    def compute_bytes(self) -> int:
        """bf16 autocast on GPU; float32 on CPU (train/step.py `_autocast`)."""
        return 2 if self.device == "cuda" else 4

    @property
    def monitored(self) -> bool:
        """Some steps run the likelihood monitor (how often does not change the peak)."""
        return self.monitor_every_steps > 0

    @property
    def sharded(self) -> bool:
        return self.strategy == "fsdp2" and self.world_size > 1

    @property
    def ddp(self) -> bool:
        return self.strategy == "ddp" and self.world_size > 1


@dataclass(frozen=True)
class MemoryEstimate:
    """Persistent terms plus the largest phase: the backward's start, the recompute of the
    last layer (activation checkpointing only), the optimizer step or the likelihood
    monitor's LM head (monitored steps only)."""

    target: TargetShape
    drafter: DrafterShape
    setup: RankSetup
    persistent: tuple[Term, ...]
    phases: tuple[Phase, ...]

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda phase: _sum(phase.terms))

    @property
    def peak_phase(self) -> str:
        return self.peak.name

    @property
    def peak_terms(self) -> tuple[Term, ...]:
        return self.peak.terms

    def phase(self, name: str) -> Phase:
        return next(phase for phase in self.phases if phase.name == name)

    @property
    def tensor_bytes(self) -> int:
        """Peak bytes of live tensors (what the CPU validation measures)."""
        return _sum(self.persistent) + _sum(self.peak_terms)

    @property
    def workspace(self) -> Term:
        if self.setup.device != "cuda":
            return Term("workspace", 0, "none on CPU")
        share = fragmentation_share(self.setup.expandable_segments)
        extra = WORKSPACE_FIXED_BYTES + int(self.tensor_bytes * share)
        segments = "expandable segments" if self.setup.expandable_segments else "fixed segments"
        return Term(
            "workspace",
            extra,
            f"CUDA context, NCCL, cuBLAS: 2 GiB; allocator fragmentation: {share:.0%} of the "
            f"tensors ({segments})",
        )

    @property
    def total_bytes(self) -> int:
        return self.tensor_bytes + self.workspace.bytes

    def fits(self, capacity_bytes: int) -> bool:
        return self.total_bytes <= capacity_bytes


def _sum(terms: tuple[Term, ...]) -> int:
    return sum(term.bytes for term in terms)


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B"


def count_query_slots(drafter: DrafterShape, setup: RankSetup) -> int:
    """Draft slots per sequence: anchors x block size (a row pads to the most anchors)."""
    return setup.anchors_per_sequence * drafter.block_size


def count_layer_activation_bytes(drafter: DrafterShape, setup: RankSetup) -> int:
    """Bytes one draft layer keeps for backward, for the whole micro-batch.

    Per query slot: two RMSNorms on H (8 B each), the q RMSNorm on heads x head_dim, the saved
    inputs of q/k/v and gate/up, q, the attention output and the merged heads for o_proj,
    SwiGLU's four [I] tensors, the attention's log-sum-exp; per key (context + slots): the k
    RMSNorm, k and v.
    """
    a = setup.compute_bytes
    h, q_width = drafter.hidden_size, drafter.num_attention_heads * drafter.head_dim
    kv_width = drafter.num_key_value_heads * drafter.head_dim
    slots = count_query_slots(drafter, setup)
    keys = setup.max_seq_len + slots
    per_slot = (
        2 * NORM_SAVED_BYTES * h
        + NORM_SAVED_BYTES * q_width
        + 2 * a * h
        + 3 * a * q_width
        + 4 * a * drafter.intermediate_size
        + ATTENTION_LSE_BYTES * drafter.num_attention_heads
    )
    per_key = (NORM_SAVED_BYTES + 2 * a) * kv_width
    layer = slots * per_slot + keys * per_key
    if setup.device == "cpu":
        # CPU attention (the dense kernel): SDPA turns the boolean mask into a float32 one
        # and keeps it for backward, in every layer. GPU flex attention keeps no mask.
        layer += slots * keys * CPU_DENSE_MASK_BYTES
    if drafter.dflash2 is None:
        return setup.batch_size * layer
    convolutions = dflash2.count_conv_activation_bytes(
        drafter.dflash2, h, a, setup.batch_size, slots
    )
    return setup.batch_size * layer + convolutions


def count_sequence_activation_bytes(drafter: DrafterShape, setup: RankSetup) -> int:
    """Bytes kept once per micro-batch outside the layers: the tapped features (fc's input),
    fc + hidden_norm on the context, the block embeddings, the RoPE tables, the final norm and
    the gathered LM-head rows."""
    a, tb = setup.compute_bytes, setup.target_bytes
    h, d = drafter.hidden_size, drafter.head_dim
    slots = count_query_slots(drafter, setup)
    context = setup.max_seq_len
    once = (
        drafter.num_taps * h * context * tb
        + (NORM_SAVED_BYTES + a) * h * context
        + tb * slots * h
        + 2 * 4 * d * (slots + context + slots)
        + NORM_SAVED_BYTES * slots * h
        + a * setup.anchors_per_sequence * (drafter.block_size - 1) * h
    )
    return setup.batch_size * once


def count_activation_bytes(drafter: DrafterShape, setup: RankSetup) -> int:
    """What autograd keeps for one micro-batch's backward, when the backward starts: every
    layer's activations, or under activation checkpointing only each layer's input."""
    once = count_sequence_activation_bytes(drafter, setup)
    if setup.activation_checkpointing:
        layer_input = setup.compute_bytes * count_query_slots(drafter, setup) * drafter.hidden_size
        return once + drafter.num_layers * setup.batch_size * layer_input
    return once + drafter.num_layers * count_layer_activation_bytes(drafter, setup)


def count_loss_chunk_rows(drafter: DrafterShape, setup: RankSetup) -> int:
    """Rows of the largest chunk: scored slots of a micro-batch (slot 0 is never scored)."""
    scored = setup.batch_size * setup.anchors_per_sequence * (drafter.block_size - 1)
    return min(setup.loss_chunk_tokens, scored)


def count_monitor_rows(setup: RankSetup) -> int:
    """Rows of the monitor's largest LM-head chunk: at most every predicted token of a
    micro-batch is supervised (b x (S - 1))."""
    return min(MONITOR_HEAD_CHUNK_ROWS, setup.batch_size * (setup.max_seq_len - 1))


def estimate_rank_memory(
    target: TargetShape, drafter: DrafterShape, setup: RankSetup
) -> MemoryEstimate:
    """Every term of one rank's peak (see the module docstring)."""
    params = drafter.count_params()
    shards = setup.world_size if setup.sharded else 1
    local = -(-params // shards)
    split = f" / {shards} ranks" if shards > 1 else ""
    target_params = target.count_params()
    dtype = {2: "bf16", 4: "float32"}.get(setup.target_bytes, f"{setup.target_bytes} B")
    persistent = [
        Term(
            "frozen target",
            target_params * setup.target_bytes,
            f"{_billions(target_params)} params in {dtype}, a full copy on every rank",
        ),
        Term(
            "drafter parameters",
            local * PARAM_BYTES,
            f"{_billions(params)} params{split}, float32 master weights",
        ),
        Term(
            "optimizer state",
            local * ADAM_STATE_BYTES,
            f"AdamW exp_avg + exp_avg_sq, float32{split}",
        ),
    ]
    if setup.ddp:
        persistent.append(
            Term("DDP gradient buckets", params * DDP_BUCKET_BYTES, "float32, one per parameter")
        )
    grads = Term("drafter gradients", local * GRAD_BYTES, f"float32{split}")
    activations = count_activation_bytes(drafter, setup)
    slots = count_query_slots(drafter, setup)
    rows = count_loss_chunk_rows(drafter, setup)
    kept = (
        "each layer's input (activation checkpointing)"
        if setup.activation_checkpointing
        else (f"{drafter.num_layers} layers")
    )
    activation_term = Term(
        "activations",
        activations,
        f"batch {setup.batch_size} x {setup.max_seq_len} tokens, "
        f"{setup.anchors_per_sequence} anchors x {drafter.block_size} = {slots} draft "
        f"slots per sequence, {kept}",
    )
    loss_term = _loss_term(drafter, rows)
    accumulated = _accumulated_gradients(setup, params, grads)
    alive = [*accumulated, *_weight_copies(drafter, setup, params)]
    knobs = drafter.dflash2
    phases = []
    if knobs is not None:
        # DFlash2: the selector's loss is the graph's last node, so its backward runs first,
        # then the LM head's chunks, with the selector's gradient made.
        top_k = dflash2.build_top_k_term(drafter, setup, knobs)
        own = dflash2.build_selector_backward_terms(drafter, setup, knobs)
        phases.append(Phase("selector backward", (activation_term, top_k, *own, *alive)))
        made = dflash2.build_selector_gradient_terms(drafter, setup, knobs)
        phases.append(Phase("backward", (activation_term, loss_term, top_k, *made, *alive)))
    else:
        phases.append(Phase("backward", (activation_term, loss_term, *alive)))
    if setup.activation_checkpointing:
        recomputed = Term(
            "recomputed layer",
            count_layer_activation_bytes(drafter, setup),
            "one layer's activations, recomputed in backward",
        )
        # The first layer is recomputed last, when every later layer's gradient exists.
        filled = (
            ()
            if setup.grad_accum > 1
            else (replace(grads, detail=grads.detail + ", filled in by the backward"),)
        )
        phases.append(Phase("layer recompute", (activation_term, recomputed, *alive, *filled)))
    phases.append(Phase("optimizer step", (grads, _optimizer_temporaries(drafter, setup, local))))
    if setup.monitored:
        phases.append(_monitor_phase(target, drafter, setup, accumulated))
    if knobs is not None:
        verifier = dflash2.build_verifier_terms(target, drafter, setup, rows)
        between = _between_micro_batches(drafter, setup, accumulated)
        phases.append(Phase("verifier argmax", (*verifier, *between)))
    return MemoryEstimate(target, drafter, setup, tuple(persistent), tuple(phases))


def _loss_term(drafter: DrafterShape, rows: int) -> Term:
    """One chunk of the LM-head loss at its backward (DFlash2's also feeds the selector)."""
    if drafter.dflash2 is None:
        per_logit, what = LOSS_BYTES_PER_LOGIT, ""
    else:
        per_logit = dflash2.SELECTOR_LOSS_BYTES_PER_LOGIT
        what = ", the top-K gather's dense gradient"
    return Term(
        "LM-head loss chunk",
        rows * drafter.vocab_size * per_logit,
        f"{rows} rows x {drafter.vocab_size} vocab x {per_logit} B "
        f"(float32 log-softmax, its gradient, the logits' gradient{what})",
    )


def _monitor_phase(
    target: TargetShape, drafter: DrafterShape, setup: RankSetup, accumulated: list[Term]
) -> Phase:
    """A monitored micro-batch's LM-head chunk (train/step.py calls the monitor between the
    target forward and the drafter's): the target's final hidden states, their supervised
    rows gathered for the head, the tapped features waiting for the drafter, and under
    accumulation the earlier micro-batches' gradients and the last one's block embeddings
    (still bound in the loop). No activation is alive, and autocast's weight copies and FSDP2's
    unsharded layers are freed at the end of each micro-batch."""
    tb, h, vocab = setup.target_bytes, target.hidden_size, target.vocab_size
    tokens = setup.batch_size * setup.max_seq_len
    supervised = setup.batch_size * (setup.max_seq_len - 1)
    rows = count_monitor_rows(setup)
    dtype = {2: "bf16", 4: "float32"}.get(tb, f"{tb} B")
    terms = [
        Term(
            "monitor LM-head chunk",
            rows * vocab * MONITOR_HEAD_BYTES_PER_LOGIT,
            f"{rows} rows x {vocab} vocab x {MONITOR_HEAD_BYTES_PER_LOGIT} B (float32 logits, "
            "their log-softmax, the rank's comparison)",
        ),
        Term(
            "target final hidden states",
            tokens * h * tb,
            f"batch {setup.batch_size} x {setup.max_seq_len} tokens x {h} in {dtype} (monitored "
            "steps run the target to its last layer)",
        ),
        Term(
            "monitored positions",
            supervised * h * tb,
            f"the final hidden states of up to {supervised} supervised positions, gathered for "
            "the LM head",
        ),
        Term(
            "tapped features",
            drafter.num_taps * tokens * h * tb,
            f"{drafter.num_taps} taps x batch {setup.batch_size} x {setup.max_seq_len} tokens, "
            "kept for the drafter's forward",
        ),
    ]
    terms += _between_micro_batches(drafter, setup, accumulated)
    return Phase("likelihood monitor", tuple(terms))


def _between_micro_batches(
    drafter: DrafterShape, setup: RankSetup, accumulated: list[Term]
) -> list[Term]:
    """What an earlier micro-batch leaves alive while the next one's target runs: under
    accumulation its gradients and its block embeddings (still bound in the loop)."""
    if setup.grad_accum == 1:
        return []
    slots = count_query_slots(drafter, setup)
    return [
        *accumulated,
        Term(
            "previous block embeddings",
            setup.batch_size * slots * drafter.hidden_size * setup.target_bytes,
            f"the earlier micro-batch's {setup.batch_size} x {slots} draft slots, "
            "rebound after the target's forward",
        ),
    ]


def _accumulated_gradients(setup: RankSetup, params: int, grads: Term) -> list[Term]:
    """Gradients of earlier micro-batches (gradient accumulation only)."""
    terms = []
    if setup.grad_accum > 1 and setup.sharded:
        # set_requires_gradient_sync(False): no reduce-scatter until the last micro-batch, so
        # the earlier ones' gradients are kept whole, in the reduce dtype (train/step.py).
        dtype = {4: "float32", 2: "bf16"}.get(setup.reduce_bytes, f"{setup.reduce_bytes} B")
        terms.append(
            Term(
                "FSDP2 accumulated gradients",
                params * setup.reduce_bytes,
                f"{_billions(params)} params, unsharded in {dtype} until the last "
                "micro-batch's reduce-scatter",
            )
        )
    elif setup.grad_accum > 1:
        terms.append(replace(grads, detail=grads.detail + ", kept across micro-batches"))
    return terms


def _weight_copies(drafter: DrafterShape, setup: RankSetup, params: int) -> list[Term]:
    """The weights' working copies while the drafter computes: FSDP2's gathered layers, or
    autocast's bf16 copies (one GPU, DDP)."""
    terms = []
    if setup.sharded:
        gathered = (
            2 * (FSDP_GATHERED_LAYERS * drafter.layer_params() + drafter.root_params())
            + FSDP_UNSHARDED_GRAD_BYTES * drafter.layer_params()
        )
        terms.append(
            Term(
                "FSDP2 unsharded layers",
                gathered,
                f"bf16 params of {FSDP_GATHERED_LAYERS} layers + fc/norms, "
                "one layer's bf16 + float32 gradient",
            )
        )
    elif setup.device == "cuda":
        terms.append(
            Term(
                "autocast weight copies",
                params * AUTOCAST_WEIGHT_BYTES,
                "bf16 copies of the float32 weights, kept for backward",
            )
        )
    return terms


def _optimizer_temporaries(drafter: DrafterShape, setup: RankSetup, local: int) -> Term:
    """AdamW's scratch: none for the fused CUDA kernel (DDP, one GPU); foreach (FSDP2) makes
    one float32 list as large as the local parameters; the CPU loop one per tensor."""
    if setup.sharded:
        return Term("optimizer temporaries", local * 4, "foreach AdamW: sqrt(exp_avg_sq)")
    if setup.device == "cuda":
        return Term("optimizer temporaries", 0, "fused AdamW")
    largest = max(
        drafter.num_taps * drafter.hidden_size**2,
        drafter.hidden_size * drafter.intermediate_size,
        drafter.hidden_size * drafter.num_attention_heads * drafter.head_dim,
    )
    return Term("optimizer temporaries", 2 * 4 * largest, "per-tensor AdamW: the largest weight")
