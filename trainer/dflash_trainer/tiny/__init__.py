"""A tiny, deterministic *target* model directory for tests and the demo (no download).

`python -m dflash_trainer.tiny --out DIR [--arch qwen3|qwen3_5]` writes a byte-level BPE
tokenizer with the Qwen3 control tokens, the real Qwen chat template and a random-weight model.
"""
