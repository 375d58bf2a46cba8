"""`python -m sluice.broker.worker.result`: print the result paths' table (`PATHS`) as
`docs/architecture.md` shows it; `--write FILE` replaces the table in FILE instead."""

from __future__ import annotations

import sys
from pathlib import Path

from sluice.broker.worker.result.paths import table

START = "<!-- the result paths: python -m sluice.broker.worker.result --write FILE -->"
END = "<!-- end of the result paths -->"


def replaced(text: str) -> str:
    """`text` with the table between START and END made anew."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise SystemExit(f"the markers of the table are not in the file: {START} ... {END}")
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(replaced(path.read_text()))
    elif not argv:
        print(table())
    else:
        raise SystemExit("usage: python -m sluice.broker.worker.result [--write FILE]")


if __name__ == "__main__":
    main(sys.argv[1:])
