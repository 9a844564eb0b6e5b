"""The ``cbs`` command line: the top of the stack, above the three layers whose commands it joins.

``cbscore.cli`` (data, train, fit, theory), ``workers.cli`` (worker, study, tracking, slurm) and
``app.cli`` (web, up, report) each add their subcommands with ``register(subparsers)``; their
handlers import heavy dependencies lazily, so ``cbs --help`` stays fast. Nothing below imports
this package (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import os
import sys

import app.cli
import cbscore.cli
import workers.cli
from cbscore.errors import CbsError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cbs",
        description="CBS Lab: measure and forecast the critical batch size of LM pre-training.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cli in (cbscore.cli, workers.cli, app.cli):  # lowest layer first: the order of `cbs --help`
        cli.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except CbsError as exc:
        print(f"cbs {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cbs {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (`| head`, a pager) closed the pipe: stop quietly, as a Unix filter does, and
        # point stdout at /dev/null so that the interpreter's final flush cannot raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
