"""The `keras-vit` command: one module per subcommand, wired together in `main.py`."""
