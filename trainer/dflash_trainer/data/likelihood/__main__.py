"""`python -m dflash_trainer.data.likelihood`: the score stage (see `cli`)."""

import sys

from dflash_trainer.data.likelihood.cli import main

sys.exit(main())
