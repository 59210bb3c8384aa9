"""Fitted step-time coefficients, one YAML file per GPU type (read by parasol.hardware.calibration)."""
