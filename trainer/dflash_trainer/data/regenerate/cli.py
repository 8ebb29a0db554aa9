"""`python -m dflash_trainer.data.regenerate`: the regeneration Job's entry point (one shard).

Exit 0 with a termination summary when the shard is committed (or already was), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.ingest import IngestStats, iter_prompts
from dflash_trainer.data.records import PromptRecord
from dflash_trainer.data.regenerate.canary import (
    SAMPLE_KEY,
    SETTINGS_KEY,
    canary_store,
    discard,
    fingerprint,
    is_current,
    load_canary_rows,
    select_canary,
)
from dflash_trainer.data.regenerate.engine import Engine, SamplingSpec, shard_seed
from dflash_trainer.data.regenerate.hf_options import BATCHING, DEVICES, resolve_streaming
from dflash_trainer.data.regenerate.runner import DEFAULT_IN_FLIGHT, ShardPlan, ShardRunner
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.data.regenerate.vllm_engine import parse_engine_args
from dflash_trainer.data.sources import load_sources
from dflash_trainer.data.stage_result import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, finish_stage
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.storage import StorageError
from dflash_trainer.versions import VersionError, require_supported_versions

DEFAULT_PART_ROWS = 2000
# Without a known context length, assume a small one rather than let prompts overflow the engine.
FALLBACK_CONTEXT = 4096


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dflash_trainer.data.regenerate",
        description="Regenerate the answers of one shard of prompts with the target model.",
    )
    p.add_argument("--run-root", required=True, help="run root (s3:// prefix or folder)")
    p.add_argument("--sources", required=True, help="sources.yaml (spec.data.sources)")
    p.add_argument(
        "--model", help="target model: folder, s3:// or pvc:// prefix, or hub id (offline cache)"
    )
    p.add_argument("--revision", help="model revision (hub ids)")
    p.add_argument("--engine", choices=("vllm", "transformers"), default="vllm")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--shard", type=int, help="default: $JOB_COMPLETION_INDEX, else 0")
    p.add_argument(
        "--thinking",
        "--enable-thinking",
        dest="enable_thinking",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="render prompts with enable_thinking (default on)",
    )
    p.add_argument("--temperature", type=float, default=SamplingSpec.temperature)
    p.add_argument("--top-p", type=float, default=SamplingSpec.top_p)
    p.add_argument("--top-k", type=int, default=SamplingSpec.top_k, help="0 disables")
    p.add_argument("--min-p", type=float, default=SamplingSpec.min_p)
    p.add_argument(
        "--max-new-tokens",
        "--max-tokens",
        dest="max_tokens",
        type=int,
        default=SamplingSpec.max_tokens,
    )
    p.add_argument("--seed", type=int, default=SamplingSpec.seed)
    p.add_argument("--repetition-penalty", type=float, default=SamplingSpec.repetition_penalty)
    p.add_argument("--presence-penalty", type=float, default=SamplingSpec.presence_penalty)
    p.add_argument("--max-model-len", type=int, help="engine context (default: the model config's)")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.90)
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="vLLM's max_num_seqs; unset: vLLM's own choice for the GPU",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        help="the target's dtype (vLLM's names: auto, bfloat16, float16, float32); transformers "
        "engine: auto is float32 on the CPU and the checkpoint's half precision on a GPU",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="transformers engine: where the target runs (auto: the GPU when torch sees one)",
    )
    p.add_argument(
        "--batching",
        choices=BATCHING,
        default="auto",
        help="transformers engine: continuous batching, static batches of generate, or auto "
        "(continuous where it keeps the sampling asked for)",
    )
    p.add_argument("--enforce-eager", action="store_true", help="vllm: skip CUDA graph capture")
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further vLLM engine argument (repeatable), e.g. max-num-seqs=256",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        default=DEFAULT_IN_FLIGHT,
        help="requests kept in the engine at once (the shard streams through it)",
    )
    p.add_argument("--batch-size", type=int, default=16, help="transformers engine batch")
    p.add_argument("--threads", type=int, help="transformers engine CPU threads")
    p.add_argument(
        "--part-rows", type=int, default=DEFAULT_PART_ROWS, help="samples per Parquet part"
    )
    p.add_argument("--end-of-turn", help="end-of-turn token (default: the tokenizer's eos)")
    p.add_argument("--chat-template", help="Jinja file overriding the tokenizer's chat template")
    p.add_argument("--progress-seconds", type=float, default=30.0)
    p.add_argument(
        "--canary-samples-per-source",
        type=int,
        metavar="N",
        help="regenerate only the canary (N fixed samples of every source) into "
        "<run-root>/canary/regen; without it, a shard reuses committed canary answers",
    )
    p.add_argument(
        "--score-likelihood",
        action="store_true",
        help="canary only: score every canary row under the target it loaded, into "
        "<run-root>/canary/likelihood (the canary gate's target-likelihood check)",
    )
    p.add_argument(
        "--max-seq-len",
        type=int,
        default=3072,
        help="with --score-likelihood: the training length rows are tokenized to "
        "(spec.tokenization.maxSeqLen)",
    )
    p.add_argument("--termination-log", help="default /dev/termination-log when it exists")
    return p


def validate(args: argparse.Namespace) -> None:
    if args.shards < 1:
        raise BadInputError(f"--shards {args.shards}: must be at least 1")
    if args.shard is None:
        raw = os.environ.get("JOB_COMPLETION_INDEX", "0")
        if not raw.isdigit():
            raise BadInputError(f"JOB_COMPLETION_INDEX={raw!r}: expected a non-negative integer")
        args.shard = int(raw)
    if not 0 <= args.shard < args.shards:
        raise BadInputError(
            f"shard {args.shard} is outside 0..{args.shards - 1} (--shards {args.shards})"
        )
    if args.canary_samples_per_source is not None and args.canary_samples_per_source < 1:
        raise BadInputError(
            f"--canary-samples-per-source {args.canary_samples_per_source}: must be at least 1"
        )
    if args.score_likelihood and args.canary_samples_per_source is None:
        raise BadInputError("--score-likelihood scores the canary: add --canary-samples-per-source")
    if args.score_likelihood and not args.model:
        raise BadInputError("--score-likelihood needs --model (the target that scores)")
    if args.max_seq_len < 2:
        raise BadInputError(f"--max-seq-len {args.max_seq_len}: must be at least 2")
    if args.max_tokens < 1 or args.part_rows < 1 or args.in_flight < 1:
        raise BadInputError("--max-new-tokens, --part-rows and --in-flight must be at least 1")
    try:
        args.engine_kwargs = parse_engine_args(args.engine_arg)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    if args.engine_kwargs and args.engine != "vllm":
        raise BadInputError("--engine-arg sets vLLM arguments: use --engine vllm or drop them")
    args.run_root = to_local_uri(args.run_root)
    args.sources = to_local_uri(args.sources)


def check_sources(stats: IngestStats) -> None:
    """A source with no usable row is a configuration error, not a data-quality question."""
    for s in stats.sources.values():
        if s.accepted == 0:
            detail = "; ".join(e for examples in s.examples.values() for e in examples[:2])
            what = f"{s.rows} rows, none usable" if s.rows else "the file is empty"
            raise BadInputError(
                f"source {s.name} ({s.uri}): {what}" + (f": {detail}" if detail else "")
            )


class Target:
    """The tokenizer-side pieces the runner needs, loaded only when something must be generated."""

    def __init__(self, args: argparse.Namespace) -> None:
        from dflash_trainer.data.target import (
            context_length,
            load_tokenizer,
            resolve_model_dir,
            token_ids,
        )

        if not args.model:
            raise BadInputError(
                "--model is required to regenerate prompts (only `regenerated` sources need none)"
            )
        self.tokenizer = load_tokenizer(args.model, args.revision)
        override = None
        if args.chat_template:
            override = Path(args.chat_template).read_text(encoding="utf-8")
        self.template = ChatTemplate.from_tokenizer(self.tokenizer, override)
        self.ids = token_ids(self.tokenizer, args.end_of_turn)
        # The tokenizer and config.json only: the weights are the engine's business (vLLM may
        # stream them from S3 without a local copy).
        self.config_dir = resolve_model_dir(args.model)
        self.model = str(args.model)
        self.context = (
            args.max_model_len
            or args.engine_kwargs.get("max_model_len")
            or context_length(self.config_dir)
            or FALLBACK_CONTEXT
        )
        backend = self.tokenizer.backend_tokenizer
        self.encode = lambda texts: [
            e.ids for e in backend.encode_batch(texts, add_special_tokens=False)
        ]


def build_engine(args: argparse.Namespace, target: Target, sampling: SamplingSpec) -> Engine:
    from dflash_trainer.data.target import resolve_model_dir

    seed = shard_seed(sampling.seed, args.shard)
    if args.engine == "transformers":
        from dflash_trainer.data.regenerate.hf_engine import TransformersEngine

        return TransformersEngine(
            resolve_model_dir(target.model, include_weights=True),
            target.tokenizer,
            sampling,
            target.ids.end_of_turn,
            seed,
            target.context,
            args.batch_size,
            args.threads,
            args.revision,
            streaming=resolve_streaming(args.batching),
            dtype=args.dtype,
            device=args.device,
        )
    from dflash_trainer.data.regenerate.vllm_engine import (
        VllmEngine,
        VllmSettings,
        choose_weight_source,
        runai_streamer_installed,
    )

    source = choose_weight_source(target.model, args.engine_kwargs, runai_streamer_installed())
    print(f"vLLM loads the target's weights {source.why}", file=sys.stderr, flush=True)
    settings = VllmSettings(
        model=source.model or resolve_model_dir(target.model, include_weights=True),
        tokenizer=target.config_dir,
        load_format=source.load_format,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=target.context,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        dtype=args.dtype,
        enforce_eager=args.enforce_eager,
        revision=args.revision,
        extra=args.engine_kwargs,
    )
    return VllmEngine(settings, sampling, target.ids.end_of_turn, seed)


def generation_fingerprint(args: argparse.Namespace) -> str:
    """Everything that shapes an answer: equal fingerprints, interchangeable answers."""
    template = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    return fingerprint(
        {
            "model": args.model, "revision": args.revision, "template": template,
            "thinking": args.enable_thinking, "engine": args.engine, "dtype": args.dtype,
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
            "min_p": args.min_p, "max_tokens": args.max_tokens, "seed": args.seed,
            "repetition_penalty": args.repetition_penalty,
            "presence_penalty": args.presence_penalty, "end_of_turn": args.end_of_turn,
            "max_model_len": args.max_model_len, "engine_args": args.engine_arg,
        }
    )  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    validate(args)
    canary = args.canary_samples_per_source
    if canary is not None:
        args.shard, args.shards = 0, 1
    store = (
        canary_store(args.run_root)
        if canary
        else ShardStore(args.run_root, args.shard, args.shards)
    )
    label = "canary" if canary else f"shard {args.shard}"
    base = {
        "stage": "regenerate",
        "shard": args.shard,
        "shards": args.shards,
        "canary": bool(canary),
        "commitUri": store.commit_uri,
    }
    settings = generation_fingerprint(args)
    stats = IngestStats()
    records = iter_prompts(load_sources(args.sources), stats)
    chosen: list[PromptRecord] = []
    sample = ""
    if canary:
        # The sample is known only after reading every source; it is small, so a canary made
        # with other settings or of another sample (a retry after a fix) is simply redone.
        chosen = select_canary(records, canary)
        check_sources(stats)
        sample = fingerprint(sorted(r.id for r in chosen))
        if not is_current(store, settings, sample):
            discard(store)
    sampling = SamplingSpec(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
        max_tokens=args.max_tokens, seed=args.seed, repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
    )  # fmt: skip
    if store.is_committed():
        done = store.read_commit()
        result = base | {
            "ok": True,
            "skipped": True,
            "samples": done.get("samples", 0),
            "outputTokens": done.get("outputTokens", 0),
            "message": f"{label} was already committed; nothing to do",
        }
        if canary and args.score_likelihood:
            result |= score_committed_canary(args, store, sampling)
        return result
    plan = ShardPlan(
        args.shard,
        args.shards,
        args.enable_thinking,
        args.part_rows,
        args.max_tokens,
        args.progress_seconds,
        args.in_flight,
    )
    canary_rows = (
        {} if canary else load_canary_rows(args.run_root, args.shard, args.shards, settings)
    )
    runner = ShardRunner(
        plan, store, lambda: Target(args), lambda t: build_engine(args, t, sampling), canary_rows
    )
    if canary:
        pending = chosen
        runner.counts.assigned = len(chosen)
    else:
        pending = runner.select(records)
        check_sources(stats)
    counts = runner.run_pending(pending)
    extra = {
        "engine": args.engine,
        "model": args.model,
        "enableThinking": args.enable_thinking,
        "sampling": asdict(sampling),
        "imported": counts.imported,
        "fromCanary": counts.from_canary,
        SETTINGS_KEY: settings,
        **({"canarySamplesPerSource": canary, SAMPLE_KEY: sample} if canary else {}),
        "overlongPrompts": counts.overlong,
        "truncated": counts.truncated,
        "ingest": stats.to_dict()
        | {"sources": [s.to_dict() | {"examples": {}} for s in stats.sources.values()]},
    }
    manifest = store.commit(counts.parts, extra)
    scores: dict[str, Any] = {}
    if canary and args.score_likelihood:
        from dflash_trainer.data.regenerate.canary_scores import build_rule, score_canary

        scores = score_canary(args, store, runner.target, runner.engine, build_rule(sampling))
    return (
        scores
        | base
        | {
            "ok": True,
            "skipped": False,
            "samples": manifest["samples"],
            "outputTokens": manifest["outputTokens"],
            "resumedFrom": counts.already_done,
            "overlongPrompts": counts.overlong,
            "malformedRows": stats.total("malformed"),
            "fromCanary": counts.from_canary,
            "message": f"{label} committed: {manifest['samples']} rows, {manifest['outputTokens']} "
            f"output tokens"
            + (f" ({counts.from_canary} samples from the canary)" if counts.from_canary else ""),
        }
    )


def score_committed_canary(
    args: argparse.Namespace, store: ShardStore, sampling: SamplingSpec
) -> dict[str, Any]:
    """A committed canary whose scores are missing or stale: load the target and score it."""
    from dflash_trainer.data.regenerate.canary_scores import (
        build_rule,
        is_scored,
        score_canary,
        scores_key,
        source_rules,
    )

    rule = build_rule(sampling)
    if is_scored(args.run_root, scores_key(store, args.max_seq_len, source_rules(args, rule))):
        return score_canary(args, store, None, None, rule)
    target = Target(args)
    engine = build_engine(args, target, sampling)
    try:
        return score_canary(args, store, target, engine, rule)
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        require_supported_versions()
        payload = run(args)
    except (BadInputError, VersionError) as exc:
        return finish_stage(
            {"stage": "regenerate", "ok": False, "message": str(exc)},
            EXIT_BAD_INPUT,
            args.termination_log,
        )
    except (StorageError, RuntimeError) as exc:
        return finish_stage(
            {"stage": "regenerate", "ok": False, "message": str(exc)},
            EXIT_ERROR,
            args.termination_log,
        )
    print(payload["message"], flush=True)
    return finish_stage(payload, EXIT_OK, args.termination_log)


if __name__ == "__main__":
    sys.exit(main())
