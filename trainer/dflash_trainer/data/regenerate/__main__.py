"""`python -m dflash_trainer.data.regenerate ...`: regenerate one shard (docs/stage-cli.md)."""

import sys

from dflash_trainer.data.regenerate.cli import main

sys.exit(main())
