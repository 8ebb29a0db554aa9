"""`python -m dflash_trainer.tiny --out DIR [--arch qwen3|qwen3_5]`: write a tiny target model.

Optionally also writes a tiny prompt file (`--prompts FILE --num-prompts N`) for demos.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dflash_trainer.tiny.build import build_metadata, build_tiny_target
from dflash_trainer.tiny.model import ARCHS, DEFAULT_HIDDEN, DEFAULT_LAYERS, TinySize
from dflash_trainer.tiny.prompts import build_prompt_records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.tiny", description="Write a tiny random-weight target."
    )
    parser.add_argument("--out", type=Path, required=True, help="directory to write")
    parser.add_argument("--arch", choices=ARCHS, default="qwen3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    parser.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN)
    parser.add_argument(
        "--teach-steps",
        type=int,
        default=0,
        help="train this many steps on chat-formatted text so generations use the format "
        "(0: pure random weights)",
    )
    parser.add_argument("--prompts", type=Path, help="also write an openai-messages JSONL here")
    parser.add_argument("--num-prompts", type=int, default=64)
    args = parser.parse_args(argv)
    if args.hidden % 4 or args.hidden <= 0 or args.layers <= 0:
        print(f"--hidden {args.hidden} / --layers {args.layers}: need positive, hidden % 4 == 0")
        return 2
    target = build_tiny_target(
        args.out,
        arch=args.arch,
        seed=args.seed,
        size=TinySize(layers=args.layers, hidden=args.hidden),
        teach_steps=args.teach_steps,
    )
    if args.prompts:
        args.prompts.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(r) for r in build_prompt_records(args.num_prompts, args.seed)]
        args.prompts.write_text("\n".join(lines) + "\n")
    print(json.dumps(build_metadata(target)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
