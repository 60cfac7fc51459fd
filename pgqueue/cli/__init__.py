"""The ``pgq`` command line: parses arguments and calls the library; no logic of its own."""

from pgqueue.cli.app import app, main

__all__ = ["app", "main"]
