"""The physics rules need: the memory ledger, FLOPs, communication, step time and the seed-003 formulas (routing, state, long context, publishing, rollout, goodput)."""
