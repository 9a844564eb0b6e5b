"""Reading a steps table from CSV (the ``cbs fit`` input; the study export writes the same)."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from cbscore.analysis._rows import REQUIRED_COLUMNS, normalize_row
from cbscore.analysis._steps_row import StepsRow
from cbscore.errors import DataError

#: Largest steps table read, in bytes (a study of 10⁵ trials exports about 15 MB).
MAX_CSV_BYTES = 64 * 2**20
#: Most data rows of a steps table.
MAX_CSV_ROWS = 1_000_000
#: Most data rows of a steps table uploaded to the web app (the Import page): ten times the trials of
#: the largest study the operator's default ceiling allows (``CBS_MAX_TRIALS`` 5,000), counted before
#: any parsing. A 1M-row upload cost the web process 112 s of CPU and 1.2 GB.
MAX_IMPORT_ROWS = 50_000
#: Most columns of a steps table (it has ten or so).
MAX_CSV_COLUMNS = 256


def check_csv_bounds(text: str, name: str) -> None:
    """A :class:`DataError` naming the limit when ``text`` is over :data:`MAX_CSV_BYTES` or its
    first line has more than :data:`MAX_CSV_COLUMNS` columns (counted before any parsing: a
    header of a million columns is refused in milliseconds)."""
    if len(text) > MAX_CSV_BYTES:
        raise DataError(f"{name}: {len(text):,} characters, over the limit of {MAX_CSV_BYTES:,} for a steps "
                        "table (MAX_CSV_BYTES).")
    end = text.find("\n")
    columns = (text if end < 0 else text[:end]).count(",") + 1
    if columns > MAX_CSV_COLUMNS:
        raise DataError(f"{name} line 1 (header): {columns:,} columns, over the limit of {MAX_CSV_COLUMNS} "
                        "(MAX_CSV_COLUMNS).")


def check_csv_rows(text: str, name: str, limit: int = MAX_IMPORT_ROWS) -> None:
    """A :class:`DataError` naming the limit when ``text`` has more than ``limit`` data rows (line
    breaks counted, nothing parsed: milliseconds for any size the byte limit lets through)."""
    rows = text.count("\n") - 1 + (0 if text.endswith("\n") else 1)
    if rows > limit:
        raise DataError(f"{name}: {rows:,} rows, over the limit of {limit:,} for a table uploaded to the web app "
                        "(MAX_IMPORT_ROWS); fit a larger one with `cbs fit TABLE.csv`.")


def read_steps_csv(path_or_file: str | os.PathLike | IO[str]) -> list[dict]:
    """Rows of a steps CSV, validated and typed (see :func:`normalize_row`).

    One row per measurement; several rows for one setting and batch size are several trials.
    Required columns ``setting,batch_size,steps``; optional ``n_params``, ``tokens``,
    ``context``, ``outcome``, ``seed`` (repeats: ``S`` per seed is the minimum over its learning
    rates) and ``budget_steps`` (a censored trial's cap, a lower bound on its ``S``); other columns
    are kept as strings and ignored by the analysis.

    Raises:
        DataError: a missing or empty file, a missing column, a row with the wrong number of
            cells, or a value that cannot be used; the message names the line, row and column.
    """
    if isinstance(path_or_file, (str, os.PathLike)):
        path = Path(path_or_file)
        name = str(path)
        try:
            if path.is_file() and path.stat().st_size > MAX_CSV_BYTES:
                raise DataError(f"{name}: {path.stat().st_size:,} bytes, over the limit of {MAX_CSV_BYTES:,} for a "
                                "steps table (MAX_CSV_BYTES).")
            text = path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            raise DataError(f"{name}: no such file.") from None
        except IsADirectoryError:
            raise DataError(f"{name}: is a directory, not a CSV file.") from None
        except UnicodeDecodeError as exc:
            raise DataError(f"{name}: not a UTF-8 text file ({exc.reason}).") from None
    else:
        name = getattr(path_or_file, "name", "<input>")
        text = path_or_file.read()
        text = text.lstrip("\ufeff")
    if not text.strip():
        raise DataError(
            f"{name}: the file is empty; expected a header with the columns {','.join(REQUIRED_COLUMNS)}."
        )
    check_csv_bounds(text, name)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [cell.strip() for cell in next(reader)]
        seen: set[str] = set()
        duplicated = sorted({c for c in header if c and (c in seen or seen.add(c))})  # linear
        if duplicated:
            raise DataError(f"{name} line 1 (header): column {duplicated[0]!r} appears more than once; "
                            f"which one holds the data is ambiguous.")
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise DataError(
                f"{name} line 1 (header): missing required column {missing[0]!r}; "
                f"the columns are {','.join(header)}."
            )
        rows = []
        for cells in reader:
            if not any(cell.strip() for cell in cells):
                continue  # blank line
            where = f"{name} line {reader.line_num} (row {len(rows) + 1})"
            if len(rows) >= MAX_CSV_ROWS:
                raise DataError(f"{name} line {reader.line_num}: more than {MAX_CSV_ROWS:,} data rows, the limit "
                                "of a steps table (MAX_CSV_ROWS).")
            if len(cells) != len(header):
                raise DataError(f"{where}: has {len(cells)} cells but the header has {len(header)} columns.")
            rows.append(normalize_row(dict(zip(header, cells)), where))
    except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL byte, ...
        raise DataError(f"{name} line {reader.line_num}: not a readable CSV row ({exc}).") from None
    if not rows:
        raise DataError(f"{name}: no data rows after the header.")
    return rows


def steps_csv_text(rows: Iterable[StepsRow | Mapping], columns: tuple[str, ...]) -> str:
    """A steps table as CSV text, the form :func:`read_steps_csv` reads (``cbs study export``, the
    report's ``steps.csv``/``trials.csv``): ``columns`` in order, other keys left out, ``None`` a blank
    cell, numbers as they are (an integer stays one)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        if isinstance(row, StepsRow):
            row = row.to_dict()
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return buf.getvalue()
