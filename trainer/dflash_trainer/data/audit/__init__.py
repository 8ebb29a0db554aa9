"""Data-audit gates: vectorized metrics over Arrow batches, per source, with a pass/fail verdict.

Gates: prompts, completions, tokens. CLI: `dflash-audit` (`audit.cli`); thresholds in
`audit.thresholds`; how to read a report: docs/audit-gates.md.
"""
