"""The target-likelihood check: would the target itself have generated these supervised tokens,
under the regeneration's sampling settings? (docs/audit-gates.md, section 8)."""
