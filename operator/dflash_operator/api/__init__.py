"""The DFlashRun API: pydantic models of spec and status (the single source of truth), the
vocabulary the operator shares (`constants`), child naming, and the CRD/doc generator.
"""

from dflash_operator.api.resource import DFlashRun, RunMetadata
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.api.validation import SpecError, parse_run, parse_spec

__all__ = [
    "DFlashRun",
    "DFlashRunSpec",
    "DFlashRunStatus",
    "RunMetadata",
    "SpecError",
    "parse_run",
    "parse_spec",
]
