"""`python -m dflash_trainer.data.tokenize ...`: tokenize regenerated completions (docs/stage-cli.md)."""

import sys

from dflash_trainer.data.tokenize.cli import main

sys.exit(main())
