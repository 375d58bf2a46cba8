"""What `SLUICE_DAG_BUNDLES` says: where DAGs come from.

A bundle is a `git` repository (versioned: each commit that changes a DAG is a version
of it, and a run keeps the commit it was created with) or a plain `folder` (not
versioned: the latest file wins, as `SLUICE_DAGS_FOLDER` always did). The JSON is
untrusted input: names, refs and paths are bounded and checked here, before any git
command sees them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A bundle's name: a folder name in the cache and a part of a DAG's location."""

REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@+-]{0,199}$")
"""A git ref, tag or sha as Sluice passes it to git: never an option (no leading `-`)."""

MAX_BUNDLES_JSON = 64 * 1024


class BundleSpec(BaseModel):
    """One bundle. `git`: `url` (a local path, `file://`, SSH or HTTPS: fetched with the
    user's own git credentials), `ref` (the branch or tag followed), `subdir` (the DAGs'
    folder inside the repository, `""` for its root). `folder`: `path`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME)
    kind: Literal["git", "folder"]
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    ref: str = Field(default="main", max_length=200)
    subdir: str = Field(default="", max_length=1000)
    path: Path | None = None

    @model_validator(mode="after")
    def _complete(self) -> BundleSpec:
        if self.kind == "git":
            if self.url is None:
                raise ValueError(f"git bundle {self.name!r} needs a url")
            if self.url.startswith("-"):
                raise ValueError(f"git bundle {self.name!r}: a url cannot start with '-'")
            if not REF.match(self.ref) or ".." in self.ref:
                raise ValueError(f"git bundle {self.name!r}: ref {self.ref!r} is not a ref")
            sub = PurePosixPath(self.subdir)
            if sub.is_absolute() or ".." in sub.parts:
                raise ValueError(f"git bundle {self.name!r}: subdir must be inside the repository")
        elif self.path is None:
            raise ValueError(f"folder bundle {self.name!r} needs a path")
        return self

    @property
    def versioned(self) -> bool:
        return self.kind == "git"


_BUNDLES = TypeAdapter(tuple[BundleSpec, ...])


def parse_bundles(text: str) -> tuple[BundleSpec, ...]:
    """The bundles of `SLUICE_DAG_BUNDLES`: a JSON list of bundle objects, names unique.
    ValueError with one line for anything else."""
    if len(text) > MAX_BUNDLES_JSON:
        raise ValueError(f"must be at most {MAX_BUNDLES_JSON} bytes of JSON")
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON list of bundles ({exc.msg})") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError("must be a non-empty JSON list of bundles")
    try:
        bundles = _BUNDLES.validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        cause = error.get("ctx", {}).get("error") or error["msg"]
        raise ValueError(f"bundle {where}: {cause}") from None
    names = [b.name for b in bundles]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"names bundle {twice[0]!r} twice")
    return bundles


def default_bundle(folder: Path) -> BundleSpec:
    """The DAGs folder as the one folder bundle (no SLUICE_DAG_BUNDLES)."""
    return BundleSpec(name="dags", kind="folder", path=folder)
