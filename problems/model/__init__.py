"""The model: architecture as typed blocks, parameter counts, the catalog and HuggingFace configs."""
