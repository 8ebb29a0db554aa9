"""`python -m dflash_trainer.data.audit ...`: the audit stage entry point (same as `dflash-audit`)."""

import sys

from dflash_trainer.data.audit.cli import main

sys.exit(main())
