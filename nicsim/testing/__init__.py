"""Helpers shared by the tests and the benchmarks (nothing in the product imports them)."""
