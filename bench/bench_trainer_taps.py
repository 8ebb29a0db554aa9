"""Hidden-state capture: our hooks on 5 layers vs `output_hidden_states=True` (the baseline).

Each variant runs in a fresh child process on the same random-weight Qwen3 (24 layers,
hidden 1024, vocab 32K) and the same batch; the child resets its peak-RSS counter after
building the model, runs the forward, and reports the peak memory added and the time.
Hooks keep only the 5 tapped outputs and stop after the last one (no later layers, no
LM head); the baseline keeps all 25 hidden states plus the logits.

    uv run python bench/bench_trainer_taps.py [--seq 1024 --batch 2 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODEL: dict[str, Any] = {
    "model_type": "qwen3",
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
}
KIB = 1024


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def child(variant: str, seq: int, batch: int) -> None:
    import torch
    from dflash_trainer.model.config import build_target_layer_ids
    from dflash_trainer.model.taps import TargetTaps
    from dflash_trainer.model.target import load_target

    torch.set_grad_enabled(False)
    target = load_target(
        path=None,
        config=MODEL,
        seed=0,
        dtype="float32",
        device=torch.device("cpu"),
        cache_dir=Path("/nonexistent"),
    )
    layer_ids = build_target_layer_ids(MODEL["num_hidden_layers"], 5)
    taps = TargetTaps(target, layer_ids)
    ids = torch.randint(
        0, MODEL["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(0)
    )
    offsets = [i + 1 for i in layer_ids]

    def baseline() -> torch.Tensor:
        hidden = target.model(input_ids=ids, output_hidden_states=True).hidden_states
        return torch.cat([hidden[i] for i in offsets], dim=-1)

    def hooks() -> torch.Tensor:
        return taps.features(ids)

    run = hooks if variant == "hooks" else baseline
    if variant == "all":
        taps.remove()
    run()  # warm up allocator and kernels
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS counter (VmHWM)
    before = rss_kib("VmRSS")
    start = time.perf_counter()
    features = run()
    seconds = time.perf_counter() - start
    peak = rss_kib("VmHWM") - before
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mib": peak / KIB,
                "features_mib": features.numel() * features.element_size() / 2**20,
            }
        )
    )


def measure(variant: str, seq: int, batch: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--seq", str(seq), "--batch", str(batch)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["hooks", "all"], default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seq, args.batch)
        return
    runs = {
        v: [measure(v, args.seq, args.batch) for _ in range(args.repeats)] for v in ("all", "hooks")
    }
    time_of = {v: statistics.median(r["seconds"] for r in rs) for v, rs in runs.items()}
    peak_of = {v: statistics.median(r["peak_mib"] for r in rs) for v, rs in runs.items()}
    print(
        f"target: random Qwen3, {MODEL['num_hidden_layers']} layers, hidden "
        f"{MODEL['hidden_size']}, vocab {MODEL['vocab_size']}; batch {args.batch} x "
        f"{args.seq} tokens, 5 taps; median of {args.repeats} fresh processes, CPU float32"
    )
    for variant, label in (
        ("all", "output_hidden_states=True (baseline)"),
        ("hooks", "hooks on 5 layers, early stop"),
    ):
        print(f"  {label:38s} {time_of[variant] * 1e3:8.1f} ms  peak +{peak_of[variant]:7.1f} MiB")
    print(f"RATIO time baseline / hooks: {time_of['all'] / time_of['hooks']:.2f}x")
    print(f"RATIO peak memory baseline / hooks: {peak_of['all'] / peak_of['hooks']:.2f}x")


if __name__ == "__main__":
    main()
