"""The core every rule shares: the Constraint type, the problem constants rules read, and the CP-SAT decision variables."""
