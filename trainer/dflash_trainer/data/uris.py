"""`pvc://<claim>/<path>` URIs, as the operator mounts claims into stage pods, to local paths.

Every other URI (s3://, local paths) passes through unchanged to `dflash_trainer.storage`.
"""

from __future__ import annotations

import os

PVC_SCHEME = "pvc://"
# Where the operator mounts each claim (operator children/pod.py): /mnt/pvc/<claim>/...
DEFAULT_PVC_ROOT = "/mnt/pvc"


def to_local_uri(uri: str) -> str:
    """pvc://claim/a/b -> $DFLASH_PVC_ROOT/claim/a/b (default /mnt/pvc); others unchanged."""
    if not uri.startswith(PVC_SCHEME):
        return uri
    root = os.environ.get("DFLASH_PVC_ROOT", DEFAULT_PVC_ROOT).rstrip("/")
    return f"{root}/{uri[len(PVC_SCHEME) :].lstrip('/')}"
