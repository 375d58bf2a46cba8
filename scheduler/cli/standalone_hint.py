"""What `sluice standalone` (without `--trigger`) says at start: how to trigger a run
from another terminal, on the same database and DAGs folder.

The command it shows works from any directory: a relative SQLite path and the DAGs
folder are made absolute; a password in the database URL is shown as `***`, never as
itself. DAG ids come from DAG files: they are shown with their control characters
spelled out and quoted for the shell.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from sluice.scheduler.cli.render import visible

MAX_DAGS_SHOWN = 20


def shown_database_url(url: str) -> str:
    """`url` for another terminal: a relative SQLite file made absolute, the password
    hidden."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        database = parsed.database or ""
        if not database.startswith("file:"):
            parsed = parsed.set(database=os.path.abspath(database))
    return parsed.render_as_string(hide_password=True)


def program() -> str:
    """How the user can run `sluice` again: `sluice` when that is on the PATH (or this
    process was not started as `sluice`), else the path it was started by."""
    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) != "sluice":
        return "sluice"
    found = shutil.which("sluice")
    if found and os.path.realpath(found) == os.path.realpath(started):
        return "sluice"
    return os.path.abspath(started)


def how_to_trigger(
    database_url: str, dags_folder: str | os.PathLike[str], dag_ids: Sequence[str]
) -> list[str]:
    """The lines to print (on stderr) when standalone starts without `--trigger`."""
    folder = os.path.abspath(dags_folder)
    url = shown_database_url(database_url)
    lines = ["sluice standalone: a scheduler and a worker run in this process until Ctrl-C"]
    if dag_ids:
        shown = ", ".join(visible(d) for d in dag_ids[:MAX_DAGS_SHOWN])
        more = len(dag_ids) - MAX_DAGS_SHOWN
        extra = f" and {more} more" if more > 0 else ""
        lines.append(f"  DAGs in {visible(folder)}: {shown}{extra}")
    else:
        lines.append(f"  no DAG in {visible(folder)} yet: a DAG file put there is picked up")
    example = dag_ids[0] if dag_ids else "DAG_ID"
    command = " ".join(
        [
            f"SLUICE_DATABASE_URL={shlex.quote(url)}",
            f"SLUICE_DAGS_FOLDER={shlex.quote(folder)}",
            program(),
            "dags",
            "trigger",
            shlex.quote(example),
        ]
    )
    lines.append("  trigger a run from another terminal:")
    lines.append(f"    {visible(command)}")
    if "***" in url and "***" not in database_url:
        lines.append("  (the database password is shown as ***)")
    return lines
