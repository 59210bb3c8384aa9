"""Megatron-LM launch lines read into a problem and a mapping: the shell layer, the flag table, model flags and the launch."""
