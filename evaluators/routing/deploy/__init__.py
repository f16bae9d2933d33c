"""Step model of a tensor- and pipeline-parallel serving instance built from measured profiles.

tables.json holds small tables derived from public measurements (Vidur's per-operator and
collective profiles, Splitwise's prompt and token times; see tables.py for the sources);
parallel.py is the step model, calibration.py its error against Splitwise's measurements.
docs/deploy.md describes the model, its measured error and what it cannot see.
"""
