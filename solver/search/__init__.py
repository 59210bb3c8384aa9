"""The search of `solve`: the space of degree rows, their cost tables and stage cuts, the master CP-SAT program and the Pareto search."""
