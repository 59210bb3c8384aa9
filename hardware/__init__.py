"""The cluster: accelerator figures, topology levels and the bandwidth between ranks, and presets.

Depends on nothing above it in parasol (problems, constraints, solver).
"""
