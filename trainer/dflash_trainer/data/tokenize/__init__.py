"""Tokenization stage: regenerated completions -> `input_ids`, `loss_mask`, `seq_len` Parquet shards.

Entry point `python -m dflash_trainer.data.tokenize` (docs/stage-cli.md); the per-row work is in
`tokenize.core`, the mask rules in `data.loss_mask`.
"""
