"""Every rule, one module per family, and the registry that selects them for a problem."""
