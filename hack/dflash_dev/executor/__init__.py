"""The process executor: plays kubelet + container runtime for its own nodes, running each pod's
first container as a local process (see docs/executor.md). Entry point: `python -m
dflash_dev.executor`; helpers for tests: `executor_logs`, `kill_pod`."""

from .logs import default_state_dir, executor_logs
from .process import kill_pod

__all__ = ["default_state_dir", "executor_logs", "kill_pod"]
