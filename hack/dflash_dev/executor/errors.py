"""Why a pod cannot start: errors the executor reports on the pod instead of raising further."""

from __future__ import annotations

# kubelet's waiting reason when env (env, envFrom) references something missing.
CONFIG_ERROR = "CreateContainerConfigError"
# kubelet's waiting reason while the pod's volumes are not set up (a Secret or ConfigMap
# volume names a missing object or key), and the Warning event it posts for each volume.
CONTAINER_CREATING = "ContainerCreating"
FAILED_MOUNT = "FailedMount"
# containerd's terminated reason (exit code 128) when the command cannot be executed.
START_ERROR = "StartError"
START_ERROR_EXIT_CODE = 128


class PodConfigError(Exception):
    """The pod references something missing (a Secret key, a ConfigMap) or unsupported here.

    kubelet keeps such a pod Pending (waiting, CreateContainerConfigError) and retries, because
    the missing object may appear; the executor does the same.
    """

    reason = CONFIG_ERROR


class VolumeMountError(PodConfigError):
    """Volumes that cannot be set up, as kubelet's volume manager reports them: one
    `FailedMount` event per volume (`MountVolume.SetUp failed for volume "v" : <cause>`,
    pkg/volume/util/operationexecutor), the pod Pending, its container waiting in
    ContainerCreating with no message, retried until the object appears."""

    reason = CONTAINER_CREATING

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.failures = failures  # (volume, the volume plugin's error), in the pod's order
        super().__init__("; ".join(mount_failure_message(v, cause) for v, cause in failures))


def mount_failure_message(volume: str, cause: str) -> str:
    """kubelet's FailedMount message (generateVolumeMsg: `%v for volume %q %v`, errSuffix)."""
    return f'MountVolume.SetUp failed for volume "{volume}" : {cause}'


class PodStartError(Exception):
    """The command cannot be executed (no command, not found): the container ends at once
    with exit code 128, as containerd reports it, and the restart policy applies."""

    reason = START_ERROR


class WaitInterruptedError(Exception):
    """The pod was deleted (or the executor is stopping) while it waited for something."""
