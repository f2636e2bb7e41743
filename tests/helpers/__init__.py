"""Subprocess worker scripts and shared set-ups of the distribute, runs and CLI tests."""
