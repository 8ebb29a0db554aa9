"""Per-rank GPU memory of DFlash training, as arithmetic: no torch, no I/O.

Its own small package (dflash-memplan), declared by both dflash-operator (the admission check,
`plan/memory_check.py`) and dflash-trainer (`python -m dflash_trainer.plan`); docs/memory-plan.md
explains every term.
"""
