"""Diagnosis of one mapping: `explain`, the rules compiled for it, the minimal conflicting set and the nearest repairs."""
