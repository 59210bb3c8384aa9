"""The problem language, the model catalog, and the mapping value with its derived sizes."""
