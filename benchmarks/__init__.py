"""The benchmark harness of keras_vit: `python -m benchmarks.bench` from the repository root."""
