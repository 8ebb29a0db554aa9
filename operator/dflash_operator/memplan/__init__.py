"""Per-rank GPU memory of DFlash training, as arithmetic: no torch, no I/O.

Shared by the operator's admission check (`plan/memory_check.py`) and the trainer's
`python -m dflash_trainer.plan`; docs/memory-plan.md explains every term.
"""
