"""Benchmarks: the study's runners, our pipeline measured through the assets' code, reports."""
