"""Acceptance-length evaluation of an exported drafter (greedy speculative decoding).
Entry point: `python -m dflash_trainer.eval --config eval.yaml`."""
