"""Compilation to CP-SAT, explain, Pareto search, output writers and the command line."""
