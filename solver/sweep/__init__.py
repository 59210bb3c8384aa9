"""`parasol sweep`: one problem solved at several cluster sizes, locally in parallel or on Ray."""
