"""`python -m dflash_dev` is the `dflash-dev` command."""

from .cli import main

main()
