"""Everything that judges a mapping: rules, and the physics they need (memory ledger, step time)."""
