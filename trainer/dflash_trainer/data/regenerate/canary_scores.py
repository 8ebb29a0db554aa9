"""The canary scores its own sample with the target it already loaded: every committed canary
row (generated or imported) is tokenized as the tokenize stage will tokenize it, and its
supervised tokens are scored by the canary's engine (vLLM prompt log-probabilities on GPU,
a transformers forward on CPU), so that the canary gate judges whether the target would have
written them (docs/audit-gates.md, section 8). Rows this run generated are judged against the
run's sampling; imported rows (`format: regenerated`) against the sampling their source declares,
and not at all where it declares none, as the score stage judges them.

    <run-root>/canary/likelihood/scores.parquet

The scores record the canary's generation and sample fingerprints: a rerun whose canary is
current reuses them, anything else scores again.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import pyarrow.parquet as pq

from dflash_trainer.data.likelihood.sample import tokenize_completions
from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.scores import (
    SOURCE_RULES_KEY,
    ScoresMeta,
    has_scores,
    read_scores,
    write_scores,
)
from dflash_trainer.data.likelihood.source_rules import run_source_rules, score_by_rule
from dflash_trainer.data.regenerate.canary import CANARY_FOLDER, SAMPLE_KEY, SETTINGS_KEY
from dflash_trainer.data.regenerate.engine import SamplingSpec
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.data.sources import load_sources
from dflash_trainer.storage import arrow_filesystem, join_uri

LIKELIHOOD_FOLDER = "likelihood"


def canary_scores_folder(run_root: str) -> str:
    return join_uri(run_root, CANARY_FOLDER, LIKELIHOOD_FOLDER)


def build_rule(sampling: SamplingSpec, default_k: int = 20) -> SamplingRule:
    return SamplingRule(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        penalized=sampling.repetition_penalty != 1.0 or sampling.presence_penalty != 0.0,
        default_k=default_k,
    )


def source_rules(args: argparse.Namespace, rule: SamplingRule) -> dict[str, SamplingRule | None]:
    return run_source_rules(load_sources(args.sources), rule)


def scores_key(
    store: ShardStore, max_seq_len: int, rules: dict[str, SamplingRule | None]
) -> dict[str, Any]:
    """What the scores were made from: the committed canary, the training length and the
    sampling each source is judged against (a changed declaration scores again)."""
    commit = store.read_commit()
    return {
        SETTINGS_KEY: commit.get(SETTINGS_KEY),
        SAMPLE_KEY: commit.get(SAMPLE_KEY),
        "maxSeqLen": max_seq_len,
        SOURCE_RULES_KEY: {n: r.to_json() if r else None for n, r in sorted(rules.items())},
    }


def is_scored(run_root: str, key: dict[str, Any]) -> bool:
    folder = canary_scores_folder(run_root)
    if not has_scores(folder):
        return False
    try:
        _, meta = read_scores(folder)
    except (OSError, ValueError):
        return False
    return all(meta.extra.get(k) == v for k, v in key.items())


def committed_rows(store: ShardStore) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entry in store.read_commit().get("files", []):
        filesystem, path = arrow_filesystem(join_uri(store.regen, entry["path"]))
        rows += pq.read_table(filesystem.open_input_file(path)).to_pylist()
    return rows


def score_canary(
    args: argparse.Namespace, store: ShardStore, target: Any, engine: Any, rule: SamplingRule
) -> dict[str, Any]:
    """Tokenize and score every committed canary row; returns the stage result's fields."""
    from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings

    rules = source_rules(args, rule)
    key = scores_key(store, args.max_seq_len, rules)
    folder = canary_scores_folder(args.run_root)
    if is_scored(args.run_root, key):
        return {"likelihoodScores": folder, "likelihoodScored": "reused"}
    eot = target.tokenizer.convert_ids_to_tokens(target.ids.end_of_turn)
    settings = TokenizeSettings(
        max_seq_len=args.max_seq_len,
        end_of_turn=eot,
        enable_thinking=args.enable_thinking,
        truncated_answers="keep",  # a cut answer is still what the target generated
        max_new_tokens=args.max_tokens,
    )
    rows, mismatched = tokenize_completions(
        committed_rows(store), RowTokenizer(target.tokenizer, target.template, settings)
    )
    started = time.monotonic()
    scorer, name, vocab = build_scorer(engine, rule)
    print(f"canary: scoring {len(rows)} rows under the target ({name})", file=sys.stderr,
          flush=True)  # fmt: skip
    scored = score_by_rule(scorer, rows, rules, rule)
    meta = ScoresMeta(rule, name, str(args.model), vocab, {**key, "templateMismatches": mismatched})
    write_scores(folder, scored, meta)
    return {
        "likelihoodScores": folder,
        "likelihoodScored": len(scored),
        "likelihoodSeconds": round(time.monotonic() - started, 3),
    }


def build_scorer(engine: Any, rule: SamplingRule) -> tuple[Any, str, int]:
    """(scorer, its description, vocabulary size) for the engine the canary generated with."""
    if engine.name == "vllm":
        from dflash_trainer.data.likelihood.vllm_scorer import VllmScorer

        vllm_scorer = VllmScorer(engine.llm, rule)
        return vllm_scorer, "vllm prompt logprobs", vllm_scorer.vocab_size
    from dflash_trainer.data.likelihood.hf_scorer import HfScorer

    model = engine.model
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    device = next(model.parameters()).device.type
    vocab = int(model.config.get_text_config().vocab_size)
    return HfScorer(model, rule), f"transformers ({device}, {dtype})", vocab
