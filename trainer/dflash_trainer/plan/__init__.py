"""`python -m dflash_trainer.plan train.yaml`: will one training rank fit its GPU?

The arithmetic is `dflash_memplan` (pure Python, shared with the operator's
admission check); this package reads a manifest into it (`inputs.py`), prints the plan
(`__main__.py`), and measures real CPU steps to check it (`meter.py`).
"""
