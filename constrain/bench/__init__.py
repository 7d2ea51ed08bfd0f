"""Benchmark harnesses: JSONSchemaBench and JSON Schema conformance, run by the CLI.

`constrain bench jsonschemabench ...`, `constrain conformance test-suite | maskbench` (or
`python -m constrain.bench.<name>`). The micro-benchmarks are scripts in the repository's bench/.
"""
