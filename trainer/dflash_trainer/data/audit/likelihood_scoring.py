"""Where a gate's likelihood scores come from: `--scores` (the canary's or the score stage's),
or scored here with `--model` when it holds weights (a sample per source, transformers on
`--device`), or nowhere: then the check is skipped and the report says why.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_trainer.data.audit.dataset import iter_batches
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.likelihood.cpu_budget import check_cpu_scoring, estimate_cpu_scoring
from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.scores import ScoresMeta, has_scores, read_scores, write_scores
from dflash_trainer.storage import StorageError, is_s3_uri

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
# The tokenize stage's default training length, when the gate is not told (`--max-seq-len`).
DEFAULT_SCORE_SEQ_LEN = 3072


@dataclass(frozen=True)
class ScoreSource:
    """The scores a gate judges (None: the check is skipped, `why` says so)."""

    uri: str | None
    why: str


def has_weights(model: str | None) -> bool:
    """A local model folder with weight files (an S3 prefix or Hub id is never downloaded by
    a gate: its weights belong on the pool that can hold them)."""
    if not model or is_s3_uri(model):
        return False
    folder = Path(model)
    return folder.is_dir() and any(
        p.name.endswith(WEIGHT_SUFFIXES) and not p.name.startswith("training_args")
        for p in folder.iterdir()
    )


def build_sampling_rule(args: argparse.Namespace, default_k: int) -> SamplingRule:
    return SamplingRule(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        default_k=default_k,
    )


def resolve_scores(args: argparse.Namespace, samples_per_source: int) -> ScoreSource:
    """Decide where the scores come from, before any data is read."""
    if args.scores:
        if not has_scores(args.scores):
            raise BadInputError(
                f"--scores {args.scores}: no scores.parquet there (the canary or the score "
                "stage writes it; or pass --model with weights to score here)"
            )
        return ScoreSource(args.scores, "")
    wanted = samples_per_source if args.score_samples is None else args.score_samples
    if not args.model:
        return ScoreSource(None, "no --model and no --scores")
    if wanted <= 0:
        return ScoreSource(None, "--score-samples 0")
    if not has_weights(args.model):
        where = (
            "an S3/Hub model is not downloaded by a gate"
            if not Path(args.model).is_dir()
            else ("it holds a tokenizer only, no weights")
        )
        return ScoreSource(None, f"--model {args.model}: {where}")
    return ScoreSource("", "")  # score here


def score_here(
    args: argparse.Namespace,
    gate: str,
    files: list[str],
    tokenizer: Any,
    rule: SamplingRule,
    per_source: int,
    out: str,
) -> str:
    """Score `per_source` rows of every source with the model in `--model`; the scores go to
    `<out>/scores.parquet` next to the report. Returns that folder."""
    import torch
    from transformers import AutoModelForCausalLM

    from dflash_trainer.data.likelihood.hf_scorer import HfScorer
    from dflash_trainer.data.likelihood.sample import (
        COMPLETION_COLUMNS,
        TOKENIZED_COLUMNS,
        select_rows,
        tokenize_completions,
        tokenized_rows,
    )

    if args.device == "cuda" and not torch.cuda.is_available():
        raise BadInputError("--device cuda: no CUDA device is visible; use --device cpu")
    columns = TOKENIZED_COLUMNS if gate == "tokens" else COMPLETION_COLUMNS
    chosen = select_rows(iter_batches(files, columns, args.batch_rows), per_source)
    if gate == "tokens":
        rows = tokenized_rows(chosen)
    else:
        rows, _ = tokenize_completions(chosen, _row_tokenizer(args, tokenizer))
    if args.device == "cpu":
        budget = estimate_cpu_scoring(Path(args.model), sum(len(r.input_ids) for r in rows))
        print(check_cpu_scoring(budget, args.force_cpu_scoring), flush=True)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"--model {args.model}: cannot load the weights: {first}") from None
    model.train(False)
    scored = HfScorer(model, rule).score(rows)
    meta = ScoresMeta(
        rule, f"transformers ({args.device}, {str(dtype).removeprefix('torch.')})",
        str(args.model), int(model.config.get_text_config().vocab_size),
    )  # fmt: skip
    try:
        write_scores(out, scored, meta)
    except StorageError as exc:
        raise BadInputError(f"--out {out}: cannot write the scores: {exc}") from None
    return out


def _row_tokenizer(args: argparse.Namespace, tokenizer: Any) -> Any:
    from dflash_trainer.data.chat_template import ChatTemplate
    from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings

    override = Path(args.chat_template).read_text(encoding="utf-8") if args.chat_template else None
    template = ChatTemplate.from_tokenizer(tokenizer, override)
    settings = TokenizeSettings(
        max_seq_len=args.max_seq_len or DEFAULT_SCORE_SEQ_LEN,
        end_of_turn=tokenizer.eos_token,
        enable_thinking=not args.no_thinking,
        truncated_answers="keep",
        max_new_tokens=args.max_tokens or None,
    )
    return RowTokenizer(tokenizer, template, settings)


def load_scores(uri: str) -> tuple[Any, ScoresMeta]:
    try:
        return read_scores(uri)
    except (OSError, ValueError) as exc:
        raise BadInputError(f"--scores {uri}: {exc}") from None
