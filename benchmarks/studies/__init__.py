"""Studies that are not speed races: `python -m benchmarks.studies.NAME` from the root."""
