"""cbscore's commands: ``cbs data``, ``cbs train``, ``cbs fit`` and ``cbs theory``.

Each lives in its own module with ``register(subparsers)``; handlers import their heavy
dependencies lazily. The ``cbs`` entry point (:mod:`cbs`, above every layer) joins these with the
workers' and the app's commands.
"""

from __future__ import annotations

import argparse

from cbscore.cli import data, fit, theory, train


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add cbscore's subcommands, in the order ``cbs --help`` lists them."""
    for module in (data, train, fit, theory):
        module.register(subparsers)
