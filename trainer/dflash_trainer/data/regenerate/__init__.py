"""Regeneration stage: answer every prompt with the target itself (vLLM, or transformers on CPU).

Entry point `python -m dflash_trainer.data.regenerate` (docs/stage-cli.md). One Job index is one
shard; output is Parquet parts plus a commit manifest written last (contract section 3).
"""
