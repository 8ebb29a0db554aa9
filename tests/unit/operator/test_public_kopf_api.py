"""The operator uses kopf's public API only: a private module (`kopf._core...`) can move in any
kopf release, and the version floor would not catch it."""

from __future__ import annotations

import re
from pathlib import Path

import dflash_operator

PRIVATE = re.compile(r"^\s*(from|import)\s+kopf\._", re.MULTILINE)


def test_no_operator_module_imports_a_private_kopf_module() -> None:
    root = Path(dflash_operator.__file__).parent
    offenders = [
        str(path.relative_to(root)) for path in sorted(root.rglob("*.py"))
        if PRIVATE.search(path.read_text())
    ]  # fmt: skip
    assert offenders == []
