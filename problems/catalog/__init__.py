"""The bundled model catalog: one YAML file per model, read by parasol.problems.model.catalog."""
