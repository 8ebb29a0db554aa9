"""The data pipeline: sources -> prompts -> regenerated completions -> tokens, and the audit gates.

Stage entry points: `dflash_trainer.data.regenerate`, `dflash_trainer.data.tokenize`,
`dflash_trainer.data.audit` (also the `dflash-audit` CLI). Contracts: docs/data-contracts.md.
"""
