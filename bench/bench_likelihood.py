"""The target-likelihood check's costs and its engine tolerance, each as a ratio against a
baseline measured in the same run (docs/benchmarks.md, "Target likelihood").

    uv run python bench/bench_likelihood.py scoring   [--repeats 5]
        CPU scoring (`HfScorer`: decoder forward, LM head on the supervised positions only,
        log-softmax, top-k, rank, the sampling rule) against a plain forward pass of the same
        model over the same tokens (`model(input_ids).logits`), on a random-weight Qwen3 with
        Qwen3's 151,936-token vocabulary.
    uv run python bench/bench_likelihood.py monitor   [--steps 200]
        The in-training monitor in the debug config (trainer/configs/debug.yaml, its
        self-distilled data: greedy, so temperature 0), scoring every 10th step: the CPU time
        a scored step takes beyond the median unscored step, as a share of the 10 steps.
    uv run python bench/bench_likelihood.py tolerance --target DIR [--rows 64]
        The engine tolerance: the target's own samples (CPU regeneration engine, float32,
        temperature 0.6) scored in float32 and in bfloat16; how far bf16 moves log-probabilities
        and support boundaries, and how many healthy rows it would call off-distribution.
    uv run python bench/bench_likelihood.py noise     [--rows 2000] [--tokens 100]
        The row false-positive rate against engine noise: healthy rows sampled from logits
        with N(0, sigma^2) noise per logit (the generating engine), scored with the clean ones
        (dflash_trainer.tiny.likelihood_noise), at sigma 0, 0.03, 0.1, 0.2 nats, under the
        default engineTolerance against the same rows judged with none (the exact support).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL: dict[str, Any] = {
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
REPO = Path(__file__).resolve().parents[1]


def bench_scoring(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from dflash_trainer.data.likelihood.hf_scorer import HfScorer
    from dflash_trainer.data.likelihood.rule import SamplingRule
    from dflash_trainer.data.likelihood.types import TokenizedRow
    from dflash_trainer.model.target import build_random_target

    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    model = build_random_target(MODEL, seed=0, dtype=torch.float32).eval()
    ids = torch.randint(0, MODEL["vocab_size"], (args.batch, args.seq))
    prompt = args.seq // 4  # supervised: the answer, 3/4 of each row
    mask = [0] * prompt + [1] * (args.seq - prompt)
    rows = [TokenizedRow(str(i), "bench", ids[i].tolist(), mask) for i in range(args.batch)]
    scorer = HfScorer(model, SamplingRule(), batch_tokens=args.batch * args.seq)
    model(input_ids=ids[:1, :64])  # warm up
    plain, score = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        model(input_ids=ids, use_cache=False).logits.sum()
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        scorer.score(rows)
        score.append(time.perf_counter() - start)
    ratios = [s / p for s, p in zip(score, plain, strict=True)]
    tokens = args.batch * args.seq
    return {
        "tokens": tokens,
        "supervised": args.batch * (args.seq - prompt),
        "plain_seconds_median": round(statistics.median(plain), 3),
        "scoring_seconds_median": round(statistics.median(score), 3),
        "scoring_tokens_per_second": round(tokens / statistics.median(score)),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "threads": torch.get_num_threads(),
    }


def bench_monitor(args: argparse.Namespace) -> dict[str, Any]:
    """Per-step CPU time (this process: the machine is shared, wall time is not its own) of
    every step, the monitor scoring every 10th; its cost is what a scored step takes beyond
    the median of the others, spread over the 10 steps it covers."""
    from dflash_trainer.train.config import load_train_config
    from dflash_trainer.train.distributed import init_distributed
    from dflash_trainer.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_train_config(
            REPO / "trainer" / "configs" / "debug.yaml",
            [f"run_root={tmp}/run", f"optim.max_steps={args.steps + 10}",
             "checkpoint.every_steps=100000", f"data.self_distill.samples={args.samples}",
             "likelihood.every_steps=10", "likelihood.temperature=0",
             "logging.every_steps=100000"],
        )  # fmt: skip
        trainer = Trainer(cfg, init_distributed(timeout_minutes=5))
        trainer.total_steps = 10
        trainer.train_steps()  # warm-up (one scored step)
        cpu: dict[bool, list[float]] = {True: [], False: []}
        wall: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.steps):
            trainer.total_steps = trainer.step + 1
            scored = (trainer.step + 1) % 10 == 0
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            trainer.train_steps()
            cpu[scored].append(time.process_time() - start_cpu)
            wall[scored].append(time.perf_counter() - start_wall)
        monitor = trainer.monitor
        assert monitor is not None and monitor.failure is None

        def share(times: dict[bool, list[float]]) -> float:
            plain = statistics.median(times[False])
            return (statistics.median(times[True]) - plain) / (10 * plain)

        return {
            "steps": args.steps,
            "scored_steps": len(cpu[True]),
            "cpu_seconds_per_step_median": round(statistics.median(cpu[False]), 4),
            "cpu_seconds_per_scored_step_median": round(statistics.median(cpu[True]), 4),
            "overhead_cpu": round(share(cpu), 4),
            "overhead_wall": round(share(wall), 4),
            "scored_rows": int(monitor.totals[:, 0].sum()),
            "off_rows": int(monitor.totals[:, 1].sum()),
            "every_steps": 10,
        }


def bench_tolerance(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from dflash_trainer.data.chat_template import ChatTemplate
    from dflash_trainer.data.likelihood.hf_scorer import HfScorer
    from dflash_trainer.data.likelihood.rows import RowRule
    from dflash_trainer.data.likelihood.rule import SamplingRule
    from dflash_trainer.data.likelihood.sample import tokenize_completions
    from dflash_trainer.data.regenerate.cli import main as regenerate
    from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings
    from dflash_trainer.tiny.prompts import build_prompt_records
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records = build_prompt_records(args.rows, seed=21)
        (work / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (work / "s.yaml").write_text(
            f"- {{name: own, uri: {work / 'p.jsonl'}, format: openai-messages}}\n"
        )
        tokenizer = AutoTokenizer.from_pretrained(args.target)
        settings = TokenizeSettings(4096, tokenizer.eos_token, True, "last", "keep")
        row_tokenizer = RowTokenizer(tokenizer, ChatTemplate.from_tokenizer(tokenizer), settings)
        for temperature in (0.6, 0.0):
            run = work / f"run-{temperature}"
            code = regenerate([
                "--run-root", str(run), "--sources", str(work / "s.yaml"), "--model", args.target,
                "--engine", "transformers", "--temperature", str(temperature),
                "--max-new-tokens", "160", "--threads", "1", "--progress-seconds", "0",
                "--termination-log", str(work / "r.json"),
            ])  # fmt: skip
            assert code == 0
            rows = [
                r
                for p in sorted((run / "regen").rglob("*.parquet"))
                for r in pq.read_table(p).to_pylist()
            ]
            tokenized, _ = tokenize_completions(rows, row_tokenizer)
            rule = SamplingRule(temperature=temperature)
            scored = {}
            for dtype in (torch.float32, torch.bfloat16):
                model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
                scored[str(dtype)] = HfScorer(model, rule).score(tokenized)
            full, half = scored["torch.float32"], scored["torch.bfloat16"]
            z_fp32 = _figures(full, rule).z
            delta = np.concatenate([np.abs(a.lp - b.lp) for a, b in zip(full, half, strict=True)])
            gaps = {k: np.concatenate([r.gap for r in v]) for k, v in scored.items()}
            offsets = np.concatenate([[0], np.cumsum([len(r.lp) for r in half])])
            off = _figures(half, rule).off
            out[f"temperature_{temperature}"] = {
                "rows": len(half),
                "tokens": int(offsets[-1]),
                "max_abs_logprob_delta": round(float(delta.max()), 4),
                "p99_abs_logprob_delta": round(float(np.percentile(delta, 99)), 4),
                "max_gap_fp32": round(float(np.nanmax(gaps["torch.float32"])), 4),
                "max_gap_bf16": round(float(np.nanmax(gaps["torch.bfloat16"])), 4),
                "off_rows_bf16": int(off.sum()),
                "off_rows_fp32": int(_figures(full, rule).off.sum()),
                "z_fp32_median": round(float(np.median(z_fp32)), 3),
                "z_fp32_max": round(float(np.max(z_fp32)), 3),
                # Without nllTolerance's shift (0.01 nats x n / sqrt(sum of variances)): how
                # much of z's offset below 0 is the tolerance, and how much the rule itself.
                "z_fp32_untolerated_median": round(
                    float(np.median(_figures(full, rule, RowRule(nll_tolerance=0.0)).z)), 3
                ),
            }
    return out


NOISE_LEVELS = (0.0, 0.03, 0.1, 0.2)


def bench_noise(args: argparse.Namespace) -> dict[str, Any]:
    from dflash_trainer.data.likelihood.rows import DEFAULT_ENGINE_TOLERANCE, RowRule
    from dflash_trainer.data.likelihood.rule import SamplingRule
    from dflash_trainer.tiny.likelihood_noise import simulate_rows

    settings = {
        "T=0.6 top-p 0.95 top-k 20": SamplingRule(temperature=0.6, top_p=0.95, top_k=20),
        "T=1.0 top-p 0.95 no top-k": SamplingRule(temperature=1.0, top_p=0.95, top_k=0),
    }
    out: dict[str, Any] = {"rows": args.rows, "tokens": args.tokens,
                           "engine_tolerance": DEFAULT_ENGINE_TOLERANCE, "table": []}  # fmt: skip
    print(f"| sampling | noise (nats) | off rows, tolerance {DEFAULT_ENGINE_TOLERANCE} | "
          "off rows, tolerance 0 (baseline) | ratio |", file=sys.stderr)  # fmt: skip
    print("|---|---|---|---|---|", file=sys.stderr)
    for name, rule in settings.items():
        for noise in NOISE_LEVELS:
            rows = simulate_rows(rule, noise, args.rows, args.tokens, seed=args.seed)
            robust = int(rows.figures(rule, RowRule()).off.sum())
            exact = int(rows.figures(rule, RowRule(engine_tolerance=0.0)).off.sum())
            ratio = robust / exact if exact else float("nan")
            print(f"| {name} | {noise:g} | {robust} ({robust / args.rows:.2%}) | "
                  f"{exact} ({exact / args.rows:.2%}) | {ratio:.3f} |", file=sys.stderr)  # fmt: skip
            out["table"].append({"sampling": name, "noise": noise, "off_rows": robust,
                                 "off_rows_baseline": exact, "ratio": round(ratio, 4)})  # fmt: skip
    return out


def _figures(rows: list[Any], rule: Any, row_rule: Any = None) -> Any:
    """Row figures (the gates' rule, default settings unless given) of a scorer's rows."""
    import numpy as np
    from dflash_trainer.data.likelihood.rows import RowRule, build_row_figures

    offsets = np.concatenate([[0], np.cumsum([len(r.lp) for r in rows])])
    cat = {
        n: np.concatenate([getattr(r, n) for r in rows]) for n in ("lp", "rank", "gap", "mu", "var")
    }
    return build_row_figures(offsets, cat["lp"], cat["rank"], cat["gap"], cat["mu"], cat["var"],
                             rule.share_k, row_rule or RowRule())  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    scoring = sub.add_parser("scoring")
    scoring.add_argument("--batch", type=int, default=4)
    scoring.add_argument("--seq", type=int, default=512)
    scoring.add_argument("--repeats", type=int, default=5)
    monitor = sub.add_parser("monitor")
    monitor.add_argument("--steps", type=int, default=200)
    monitor.add_argument("--samples", type=int, default=512)
    tolerance = sub.add_parser("tolerance")
    tolerance.add_argument("--target", required=True)
    tolerance.add_argument("--rows", type=int, default=64)
    noise = sub.add_parser("noise")
    noise.add_argument("--rows", type=int, default=2000)
    noise.add_argument("--tokens", type=int, default=100)
    noise.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    run = {"scoring": bench_scoring, "monitor": bench_monitor, "tolerance": bench_tolerance,
           "noise": bench_noise}  # fmt: skip
    print(json.dumps({args.what: run[args.what](args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
