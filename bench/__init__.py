"""Micro-benchmarks (regex, grammar, samplers, processors, speculative) and benchmark reports.

Scripts run from the repository root, `python bench/regexes.py --help`; they are not part of the
installed package. The JSONSchemaBench and conformance harnesses are features of the package
(constrain.bench, `constrain bench jsonschemabench`); their reports are kept here as JSON.
"""
