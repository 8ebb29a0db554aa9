"""GPU memory sizes: Kubernetes quantities (`96Gi`, `180G`) and `96GB`/`96GiB` spellings."""

from __future__ import annotations

import re

_FACTORS = {
    "": 1,
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_memory_size(text: str) -> int:
    """Bytes of `text`; ValueError names what is accepted."""
    match = _SIZE.match(str(text))
    if not match or match.group(2) not in _FACTORS:
        raise ValueError(
            f"memory size {text!r} is not accepted; accepted: a number with a unit such as "
            "96Gi, 180G, 96GB or 96GiB (Gi/GiB = 2^30 bytes, G/GB = 10^9)"
        )
    return int(float(match.group(1)) * _FACTORS[match.group(2)])
