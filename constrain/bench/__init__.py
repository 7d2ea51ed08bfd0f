"""Benchmark harnesses: scripts that print tables (run with python -m constrain.bench.<name>)."""
