"""Git bundles on this host: one mirror per bundle, and one checkout per commit.

Layout under `SLUICE_BUNDLE_CACHE`: `<bundle>/mirror.git` (a bare mirror of the remote's
branches and tags) and `<bundle>/<full sha>/` (the commit's files, never changed once
there). Every process of the host shares them, schedulers and workers alike:

- Fetches (and the mirror's creation) hold `<bundle>/.lock` (`fcntl.flock`): two
  processes never write the mirror's refs at once.
- A checkout is extracted from `git archive` into a temporary folder beside its place
  and renamed there in one step: a process sees a commit's folder whole or not at all;
  two processes that extract one commit at once keep the first rename.
- Past `keep` checkouts a bundle's least recently used ones are removed (a use touches
  the folder), never the one just asked for; a worker restarted keeps what is on disk.

Refs, shas and paths come from users: each is checked (`bundle_specs.REF`) and passed
after `--end-of-options`, so none can be read by git as an option. Git runs without a
terminal prompt, within `GIT_TIMEOUT`, without the deployment's secret variables.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sluice.scheduler.core.bundle_specs import REF, BundleSpec
from sluice.scheduler.core.settings import Settings

GIT_TIMEOUT = 120.0
"""Seconds one git command may take (a fetch of a big remote included)."""

MAX_COMMITS_A_FETCH = 50
"""Commits between two fetches parsed one by one at most; past that, the newest ones."""

SCHEME = "bundle://"
"""How a DAG of a git bundle names its file: `bundle://<bundle>/<path in the repository>`
(its checkout differs per host and commit; this does not)."""


class BundleError(RuntimeError):
    """A git command that failed; the message is one line for the user."""


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: str
    date: str
    """ISO 8601, the author's date."""
    subject: str


def location(bundle: str, path: str) -> str:
    """The `fileloc` of a git bundle's DAG file at `path` (inside the repository)."""
    return f"{SCHEME}{bundle}/{path}"


def parse_location(fileloc: str) -> tuple[str, str] | None:
    """(bundle, path in the repository) of a git bundle's `fileloc`; None for a path."""
    if not fileloc.startswith(SCHEME):
        return None
    bundle, _, path = fileloc[len(SCHEME) :].partition("/")
    return bundle, path


def local_file(
    bundles: Mapping[str, GitBundle], fileloc: str, bundle_version: str | None, who: str
) -> str:
    """The local path of `fileloc` as of `bundle_version`, among this process's git
    `bundles` (`who` names the process in errors: "worker", "triggerer"): a folder's
    path as it is, a git bundle's file in this host's checkout of that commit (made on
    first use). LookupError for a bundle the process does not know or no commit;
    BundleError (one line) when the commit cannot be fetched or checked out."""
    place = parse_location(fileloc)
    if place is None:
        return fileloc
    name, path = place
    bundle = bundles.get(name)
    if bundle is None:
        raise LookupError(f"DAG bundle {name!r} is not in this {who}'s SLUICE_DAG_BUNDLES")
    if bundle_version is None:
        raise LookupError(f"the run of {fileloc} has no commit to run")
    return str(bundle.checkout(bundle_version) / path)


def checked_rev(rev: str) -> str:
    """`rev` if it may be given to git as a revision (a sha, a tag, a branch); else a
    BundleError naming it."""
    if not REF.match(rev) or ".." in rev:
        raise BundleError(f"{rev[:80]!r} is not a commit, tag or branch name")
    return rev


class GitBundle:
    """One git bundle's mirror and checkouts on this host."""

    def __init__(
        self, spec: BundleSpec, cache: Path, *, keep: int = 16, drop_env: Collection[str] = ()
    ) -> None:
        assert spec.kind == "git" and spec.url is not None
        self.spec = spec
        self.root = cache / spec.name
        self.mirror = self.root / "mirror.git"
        self.keep = keep
        self._env = {k: v for k, v in os.environ.items() if k not in drop_env}
        self._env["GIT_TERMINAL_PROMPT"] = "0"  # a missing credential fails, never waits

    @property
    def name(self) -> str:
        return self.spec.name

    def fetch(self) -> str:
        """Fetch the remote's branches and tags into the mirror; the full sha `ref` names
        now. BundleError when the remote cannot be read or has no such ref."""
        with self._locked():
            self._fetch_locked()
        return self._rev_parse(self.spec.ref)

    def resolve(self, rev: str) -> str:
        """The full sha of `rev` (a full or short sha, a tag, a branch): from the mirror,
        fetched first when it does not know `rev`."""
        checked_rev(rev)
        try:
            return self._rev_parse(rev)
        except BundleError:
            pass
        with self._locked():
            self._fetch_locked()
        return self._rev_parse(rev)

    def checkout(self, sha: str) -> Path:
        """The folder holding commit `sha`'s files (the repository's root), extracted on
        first use, fetched first if the mirror lacks it. BundleError if it cannot be."""
        checked_rev(sha)
        place = self.root / sha
        if not place.is_dir():
            self.resolve(sha)
            self._extract(sha, place)
        with contextlib.suppress(OSError):
            os.utime(place)
        self._evict(keep=place)
        return place

    def dags_folder(self, sha: str) -> Path:
        """The folder of the DAG files (`subdir`) in commit `sha`'s checkout."""
        return self.checkout(sha) / self.spec.subdir

    def commits_between(self, old: str | None, new: str) -> list[str]:
        """The commits after `old` up to `new` that change the DAGs' folder, oldest
        first, `new` last whatever it changes; `[new]` alone when `old` is None or not an
        ancestor (a forced push). At most `MAX_COMMITS_A_FETCH`, the newest."""
        if old is None or old == new:
            return [new]
        try:
            self._git("merge-base", "--is-ancestor", "--end-of-options", old, new)
        except BundleError:
            return [new]
        args = ["rev-list", "--reverse", f"{old}..{new}"]
        if self.spec.subdir:
            args += ["--", self.spec.subdir]
        shas = [line for line in self._git(*args).split() if line]
        if not shas or shas[-1] != new:
            shas.append(new)
        return shas[-MAX_COMMITS_A_FETCH:]

    def commit_info(self, sha: str) -> CommitInfo:
        out = self._git("log", "-1", "--format=%H%x00%an%x00%aI%x00%s", "--end-of-options", sha)
        full, author, date, subject = (out.rstrip("\n").split("\x00") + ["", "", ""])[:4]
        return CommitInfo(sha=full, author=author[:250], date=date, subject=subject[:1000])

    def read_file(self, sha: str, path: str, limit: int = 1024 * 1024) -> str:
        """The text of `path` (in the repository) at commit `sha`, at most `limit` bytes."""
        checked_rev(sha)
        clean = PurePosixPath(path)
        if clean.is_absolute() or ".." in clean.parts:
            raise BundleError(f"{path[:80]!r} is not a path in the repository")
        done = self._run(["git", "--git-dir", str(self.mirror), "show", f"{sha}:{clean}"])
        return done.stdout[:limit].decode("utf-8", errors="replace")

    # -- git

    def _fetch_locked(self) -> None:
        if not (self.mirror / "HEAD").exists():
            self._run(["git", "init", "--quiet", "--bare", str(self.mirror)])
        url = self.spec.url or ""
        self._git(
            "fetch",
            "--quiet",
            "--prune",
            "--force",
            "--no-tags",
            "--end-of-options",
            url,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        )

    def _rev_parse(self, rev: str) -> str:
        if not (self.mirror / "HEAD").exists():
            raise BundleError(f"bundle {self.name!r} was never fetched")
        try:
            out = self._git(
                "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"
            )
        except BundleError:
            out = ""
        sha = out.strip()
        if not sha:
            raise BundleError(f"bundle {self.name!r} has no commit, tag or branch {rev!r}")
        return sha

    def _git(self, *args: str) -> str:
        done = self._run(["git", "--git-dir", str(self.mirror), *args])
        return done.stdout.decode("utf-8", errors="replace")

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                env=self._env,
                timeout=GIT_TIMEOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BundleError(f"git {argv[3] if len(argv) > 3 else ''} timed out") from None
        except OSError as exc:
            raise BundleError(f"git cannot run: {exc}") from None
        if done.returncode != 0:
            what = next(
                (a for a in argv[1:] if not a.startswith("-") and a != str(self.mirror)), "git"
            )
            lines = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            cause = lines[-1] if lines else f"exit {done.returncode}"
            raise BundleError(f"bundle {self.name!r}: git {what} failed: {cause[:300]}")
        return done

    def _extract(self, sha: str, place: Path) -> None:
        """Extract `sha` into `place`: `git archive` read as a stream by `tarfile` (the
        "data" filter: no link or path leaves the folder), then one rename."""
        self.root.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=".checkout-", dir=self.root))
        try:
            argv = ["git", "--git-dir", str(self.mirror), "archive", "--format=tar", sha]
            with subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=self._env,
            ) as proc:
                assert proc.stdout is not None
                with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                    archive.extractall(temp, filter="data")
                proc.stdout.close()
                error = proc.stderr.read() if proc.stderr else b""
                if proc.wait(timeout=GIT_TIMEOUT) != 0:
                    cause = error.decode("utf-8", errors="replace").strip()[:300]
                    raise BundleError(f"bundle {self.name!r}: checkout of {sha} failed: {cause}")
            try:
                temp.rename(place)
            except OSError:
                if not place.is_dir():  # not another process's checkout of the same commit
                    raise
        except (tarfile.TarError, OSError) as exc:
            raise BundleError(f"bundle {self.name!r}: checkout of {sha} failed: {exc}") from None
        finally:
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used checkouts past `self.keep` (never `keep`)."""
        try:
            found = [
                p
                for p in self.root.iterdir()
                if p.is_dir() and not p.name.startswith(".") and p.name != "mirror.git"
            ]
        except OSError:
            return
        if len(found) <= self.keep:
            return
        found.sort(key=_mtime, reverse=True)
        for old in found[self.keep :]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def bundles_of(settings: Settings) -> dict[str, GitBundle]:
    """The git bundles of `settings`, by name, in its bundle cache (git runs without the
    secret variables tasks do not see)."""
    return {
        b.name: GitBundle(
            b,
            settings.bundle_cache,
            keep=settings.bundle_cache_versions,
            drop_env=settings.hidden_from_tasks,
        )
        for b in settings.bundles
        if b.kind == "git"
    }
