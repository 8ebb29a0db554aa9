"""Why a pod cannot start: errors the executor reports on the pod instead of raising further."""

from __future__ import annotations

# kubelet's waiting reason when env or volumes reference something missing.
CONFIG_ERROR = "CreateContainerConfigError"
# containerd's terminated reason (exit code 128) when the command cannot be executed.
START_ERROR = "StartError"
START_ERROR_EXIT_CODE = 128


class PodConfigError(Exception):
    """The pod references something missing (a Secret key, a ConfigMap) or unsupported here.

    kubelet keeps such a pod Pending (waiting, CreateContainerConfigError) and retries, because
    the missing object may appear; the executor does the same.
    """

    reason = CONFIG_ERROR


class PodStartError(Exception):
    """The command cannot be executed (no command, not found): the container ends at once
    with exit code 128, as containerd reports it, and the restart policy applies."""

    reason = START_ERROR


class WaitInterruptedError(Exception):
    """The pod was deleted (or the executor is stopping) while it waited for something."""
