"""`python -m dflash_trainer.data.likelihood`: the score stage of imported completions
(regeneration disabled), on the pool that can hold the target.

1. The sources (format `regenerated`) are copied into `<run-root>/regen/` as one committed
   shard, exactly as the regenerate stage copies imported rows (nothing is generated).
2. `--samples-per-source` rows of every source (the smallest sha256 of their ids) are
   tokenized as the tokenize stage will tokenize them and scored under the target (vLLM prompt
   log-probabilities, or a transformers forward), into `--out` (scores.parquet), each source
   under the sampling it declares (`sampling` in sources.yaml); a source that declares none is
   judged under `--temperature/--top-p/--top-k/--min-p` when given, else its sampling is
   unknown and no rule judges its rows (the gates' reports name the rules skipped).

The completions and tokens gates then judge those scores (`dflash-audit --scores`).
Exit 0 with a termination summary, 2 on bad input, 1 anything else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dflash_trainer.data.audit.dataset import iter_batches, resolve_files
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.likelihood.sample import (
    COMPLETION_COLUMNS,
    select_rows,
    tokenize_completions,
)
from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.scores import SOURCE_RULES_KEY, ScoresMeta, write_scores
from dflash_trainer.data.likelihood.source_rules import (
    UNKNOWN_RULE,
    declared_rules,
    rules_json,
    score_by_rule,
)
from dflash_trainer.data.regenerate.engine import SamplingSpec
from dflash_trainer.data.sources import load_sources
from dflash_trainer.data.stage_result import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, finish_stage
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.storage import StorageError, join_uri

DEFAULT_OUT = "likelihood/sample"


def build_parser() -> argparse.ArgumentParser:
    sampling = SamplingSpec()
    p = argparse.ArgumentParser(
        prog="python -m dflash_trainer.data.likelihood",
        description="Import completions made elsewhere and score a sample of every source "
        "under the target (the target-likelihood check's input).",
    )
    p.add_argument("--run-root", required=True, help="run root (s3:// prefix or folder)")
    p.add_argument("--sources", required=True, help="sources.yaml (every format: regenerated)")
    p.add_argument("--model", required=True, help="the target: folder, s3:// prefix, hub id")
    p.add_argument("--revision", help="model revision (hub ids)")
    p.add_argument("--engine", choices=("vllm", "transformers"), default="vllm")
    p.add_argument("--samples-per-source", type=int, default=64, metavar="N",
                   help="rows of each source to score (0: import only)")  # fmt: skip
    p.add_argument("--temperature", type=float,
                   help="the sampling of sources that declare none (0: greedy; unset: unknown, "
                   f"else --top-p {sampling.top_p:g}, --top-k {sampling.top_k}, --min-p "
                   f"{sampling.min_p:g} unless given)")  # fmt: skip
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int, help="0: none")
    p.add_argument("--min-p", type=float)
    p.add_argument("--default-k", type=int, default=20,
                   help="k of the top-k share without a top-k (audit.likelihood.topK)")  # fmt: skip
    p.add_argument("--max-seq-len", type=int, default=3072, help="the training length")
    p.add_argument("--max-new-tokens", type=int, help="the generation limit, when known")
    p.add_argument("--thinking", "--enable-thinking", dest="enable_thinking",
                   action=argparse.BooleanOptionalAction, default=True)  # fmt: skip
    p.add_argument("--chat-template", help="Jinja file overriding the tokenizer's chat template")
    p.add_argument("--end-of-turn", help="end-of-turn token (default: the tokenizer's eos)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="transformers engine: where the target scores")  # fmt: skip
    p.add_argument("--force-cpu-scoring", action="store_true",
                   help="transformers on CPU: score although the estimate says the target does "
                   "not fit")  # fmt: skip
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.90)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", help=f"scores folder (default <run-root>/{DEFAULT_OUT})")
    p.add_argument("--termination-log", help="default /dev/termination-log when it exists")
    return p


def import_completions(args: argparse.Namespace) -> dict[str, Any]:
    """Step 1: the regenerate stage's own import of `regenerated` sources (one shard)."""
    from dflash_trainer.data.regenerate.cli import build_parser as regen_parser
    from dflash_trainer.data.regenerate.cli import run as regen_run

    argv = ["--run-root", args.run_root, "--sources", args.sources, "--shards", "1",
            "--shard", "0", "--termination-log", ""]  # fmt: skip
    if args.max_new_tokens:
        argv += ["--max-new-tokens", str(args.max_new_tokens)]
    return regen_run(regen_parser().parse_args(argv))


def build_row_tokenizer(args: argparse.Namespace, tokenizer: Any) -> Any:
    from dflash_trainer.data.chat_template import ChatTemplate
    from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings

    override = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    settings = TokenizeSettings(
        max_seq_len=args.max_seq_len,
        end_of_turn=args.end_of_turn or tokenizer.eos_token,
        enable_thinking=args.enable_thinking,
        truncated_answers="keep",
        max_new_tokens=args.max_new_tokens,
    )
    return RowTokenizer(tokenizer, ChatTemplate.from_tokenizer(tokenizer, override), settings)


def build_scorer(args: argparse.Namespace, rule: SamplingRule) -> tuple[Any, str, int]:
    """(scorer, its description, vocabulary size) on the requested engine."""
    from dflash_trainer.data.target import resolve_model_dir

    if args.engine == "vllm":
        from dflash_trainer.data.likelihood.vllm_scorer import VllmScorer
        from dflash_trainer.data.regenerate.vllm_engine import (
            VllmSettings,
            build_llm_kwargs,
            choose_weight_source,
            parse_engine_args,
            runai_streamer_installed,
        )

        try:
            from vllm import LLM
        except ImportError:
            raise BadInputError("--engine vllm needs the vllm package (the regen image)") from None
        try:
            extra = parse_engine_args(args.engine_arg)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
        source = choose_weight_source(args.model, extra, runai_streamer_installed())
        settings = VllmSettings(
            model=source.model or resolve_model_dir(args.model, include_weights=True),
            tokenizer=resolve_model_dir(args.model), load_format=source.load_format,
            tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs,
            dtype=args.dtype, enforce_eager=args.enforce_eager, revision=args.revision,
            extra=extra,
        )  # fmt: skip
        scorer = VllmScorer(LLM(**build_llm_kwargs(settings, seed=0)), rule)
        return scorer, "vllm prompt logprobs", scorer.vocab_size
    import torch
    from transformers import AutoModelForCausalLM

    from dflash_trainer.data.likelihood.hf_scorer import HfScorer

    device: str = (
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device == "cpu":
        from dflash_trainer.data.likelihood.cpu_budget import (
            check_cpu_scoring,
            estimate_cpu_scoring,
        )

        folder = Path(resolve_model_dir(args.model, include_weights=True))
        budget = estimate_cpu_scoring(folder, getattr(args, "score_tokens", 0))
        print(check_cpu_scoring(budget, args.force_cpu_scoring), flush=True)
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    dtype = dtypes.get(args.dtype) or (torch.bfloat16 if device == "cuda" else torch.float32)
    model: Any = AutoModelForCausalLM.from_pretrained(
        resolve_model_dir(args.model, include_weights=True), dtype=dtype, revision=args.revision
    )
    model = model.to(device)
    model.train(False)
    name = f"transformers ({device}, {str(dtype).removeprefix('torch.')})"
    return HfScorer(model, rule), name, int(model.config.get_text_config().vocab_size)


def build_source_rules(args: argparse.Namespace) -> dict[str, SamplingRule]:
    """The sampling each source declares (`sources[].sampling`); undeclared ones are absent."""
    return declared_rules(load_sources(args.sources), args.default_k)


def undeclared_rule(args: argparse.Namespace) -> SamplingRule | None:
    """The sampling given on the command line for sources that declare none (None: unknown)."""
    given = (args.temperature, args.top_p, args.top_k, args.min_p)
    if all(v is None for v in given):
        return None
    d = SamplingSpec()
    return SamplingRule(
        temperature=d.temperature if args.temperature is None else args.temperature,
        top_p=d.top_p if args.top_p is None else args.top_p,
        top_k=d.top_k if args.top_k is None else args.top_k,
        min_p=d.min_p if args.min_p is None else args.min_p,
        default_k=args.default_k,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dflash_trainer.data.target import load_tokenizer

    if args.samples_per_source < 0:
        raise BadInputError(f"--samples-per-source {args.samples_per_source}: must be 0 or more")
    for name in ("run_root", "sources", "out"):
        if getattr(args, name):
            setattr(args, name, to_local_uri(getattr(args, name)))
    out = args.out or join_uri(args.run_root, DEFAULT_OUT)
    imported = import_completions(args)
    base = {"stage": "score", "ok": True, "samples": imported.get("samples", 0)}
    if args.samples_per_source == 0:
        return base | {"scored": 0, "message": f"imported {base['samples']} completions"}
    files = resolve_files(join_uri(args.run_root, "regen"))
    chosen = select_rows(iter_batches(files, COMPLETION_COLUMNS), args.samples_per_source)
    tokenizer = load_tokenizer(args.model, args.revision)
    rows, mismatched = tokenize_completions(chosen, build_row_tokenizer(args, tokenizer))
    rules = build_source_rules(args)
    fallback = undeclared_rule(args)
    args.score_tokens = sum(len(r.input_ids) for r in rows)
    scorer, name, vocab = build_scorer(args, fallback or UNKNOWN_RULE)
    rule_of: dict[str, SamplingRule | None] = dict(rules)
    scored = score_by_rule(scorer, rows, rule_of, fallback)
    extra = {
        "templateMismatches": mismatched,
        SOURCE_RULES_KEY: rules_json(rows, rule_of, fallback),
    }
    meta = ScoresMeta(fallback or UNKNOWN_RULE, name, str(args.model), vocab, extra)
    uri = write_scores(out, scored, meta)
    return base | {
        "scored": len(scored),
        "scoresUri": out,
        "message": f"imported {base['samples']} completions; scored {len(scored)} rows of "
        f"{len({r.source for r in rows})} sources under the target ({name}) -> {uri}",
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        payload = run(args)
    except BadInputError as exc:
        return finish_stage(
            {"stage": "score", "ok": False, "message": str(exc)}, EXIT_BAD_INPUT,
            args.termination_log,
        )  # fmt: skip
    except (StorageError, RuntimeError) as exc:
        return finish_stage(
            {"stage": "score", "ok": False, "message": str(exc)}, EXIT_ERROR, args.termination_log
        )
    print(payload["message"], flush=True)
    return finish_stage(payload, EXIT_OK, args.termination_log)


if __name__ == "__main__":
    sys.exit(main())
