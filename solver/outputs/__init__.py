"""What parasol writes: terminal tables, solution and rank-map files, Megatron launch lines, reports and plots."""
