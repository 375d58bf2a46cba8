"""Optional profiling of the workloads with py-spy (`--profile DIR`).

Live processes (scheduler, worker and its pool children) and the bench's own
in-process passes are sampled with `py-spy record --idle --nonblocking` in raw
(collapsed-stack) format, so time spent waiting on the database or the broker
counts. Summaries give, per function (`file:function`), the share of samples
whose stack contains it (inclusive) and where it is the leaf (self), optionally
only over the samples under a focus function (e.g. `tick`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.procs import REPO_ROOT

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    if found.exists():
        return str(found)
    return shutil.which("py-spy")


def short_file(path: str) -> str:
    for marker in ("site-packages/", f"{REPO_ROOT}/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def parse_raw(text: str) -> list[tuple[list[str], int]]:
    """Collapsed stacks: (frames root-first as `file:function`, sample count)."""
    stacks: list[tuple[list[str], int]] = []
    for line in text.splitlines():
        head, _, count = line.rpartition(" ")
        if not head or not count.isdigit():
            continue
        frames = []
        for raw in head.split(";"):
            match = _FRAME.match(raw)
            if match:
                frames.append(f"{short_file(match['file'])}:{match['func']}")
            else:
                frames.append(raw)
        stacks.append((frames, int(count)))
    return stacks


def _function(frame: str) -> str:
    """`f` of `file.py:Class.f` or `file.py:f`."""
    return frame.rpartition(":")[2].rpartition(".")[2]


def summarize(
    stacks: Sequence[tuple[list[str], int]], focus: str | None = None, top: int = 25
) -> dict[str, Any]:
    """Inclusive and self shares per function, over all samples or those under `focus`."""
    selected: list[tuple[list[str], int]] = []
    for frames, count in stacks:
        if focus is None:
            selected.append((frames, count))
            continue
        at = next((i for i, f in enumerate(frames) if _function(f) == focus), None)
        if at is not None:
            selected.append((frames[at:], count))
    total = sum(count for _, count in selected)
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for frames, count in selected:
        for name in set(frames):
            inclusive[name] += count
        if frames:
            leaf[frames[-1]] += count
    all_samples = sum(count for _, count in stacks)

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "pct": round(100.0 * n / total, 1), "samples": n}
            for name, n in counter.most_common(top)
        ]

    return {
        "focus": focus,
        "samples": total,
        "share_of_all_samples_pct": round(100.0 * total / all_samples, 1) if all_samples else 0,
        "inclusive": table(inclusive) if total else [],
        "self": table(leaf) if total else [],
    }


class Profiler:
    """Records py-spy profiles into `out_dir`; does nothing when disabled."""

    def __init__(self, out_dir: Path | None, rate: int = 250) -> None:
        self.exe = py_spy() if out_dir is not None else None
        self.out_dir = out_dir
        self.rate = rate
        self.summaries: dict[str, dict[str, Any]] = {}
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            if self.exe is None:
                print("bench: --profile needs py-spy (pip install py-spy); not profiling")

    @property
    def enabled(self) -> bool:
        return self.exe is not None and self.out_dir is not None

    @contextlib.contextmanager
    def record(
        self,
        name: str,
        pid: int,
        *,
        subprocesses: bool = False,
        focus: Sequence[str | None] = (None,),
    ) -> Iterator[None]:
        """Sample `pid` while the block runs; then summarize it (once per focus)."""
        if not self.enabled:
            yield
            return
        assert self.exe is not None and self.out_dir is not None
        raw = self.out_dir / f"{name}.txt"
        argv = [
            self.exe,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "-o",
            str(raw),
            "--idle",
            "--nonblocking",
            "--rate",
            str(self.rate),
        ]
        if subprocesses:
            argv.append("--subprocesses")
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.7)  # attach before the work starts
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
        if raw.exists():
            stacks = parse_raw(raw.read_text(errors="replace"))
            for key in focus:
                label = name if key is None else f"{name}@{key}"
                self.summaries[label] = summarize(stacks, key)
            self._write_text()

    def command(self, name: str, argv: Sequence[str]) -> list[str]:
        """`argv` run under `py-spy record` into `name`'s raw file (`collect` it once it has
        exited); `argv` itself when disabled. For short-lived commands (the CLI)."""
        if not self.enabled:
            return list(argv)
        assert self.exe is not None and self.out_dir is not None
        raw = self.out_dir / f"{name}.txt"
        spy = [self.exe, "record", "--format", "raw", "-o", str(raw), "--idle"]
        return [*spy, "--rate", str(self.rate), "--", *argv]

    def collect(self, name: str, focus: Sequence[str | None] = (None,)) -> None:
        """Summarize the raw file a `command` wrote, if it did."""
        if not self.enabled:
            return
        assert self.out_dir is not None
        raw = self.out_dir / f"{name}.txt"
        if raw.exists():
            stacks = parse_raw(raw.read_text(errors="replace"))
            for key in focus:
                self.summaries[name if key is None else f"{name}@{key}"] = summarize(stacks, key)
            self._write_text()

    def _write_text(self) -> None:
        assert self.out_dir is not None
        lines: list[str] = []
        for label, summary in self.summaries.items():
            lines.append(
                f"== {label}: {summary['samples']} samples "
                f"({summary['share_of_all_samples_pct']}% of the process's samples)"
            )
            lines.append("-- inclusive")
            lines += [f"{r['pct']:6.1f}%  {r['function']}" for r in summary["inclusive"]]
            lines.append("-- self")
            lines += [f"{r['pct']:6.1f}%  {r['function']}" for r in summary["self"]]
            lines.append("")
        (self.out_dir / "summary.txt").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.profiling RAW [--focus F] [--top N]`: summarize a recorded profile."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.profiling")
    p.add_argument("raw", type=Path)
    p.add_argument("--focus")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    summary = summarize(parse_raw(args.raw.read_text(errors="replace")), args.focus, args.top)
    print(f"{summary['samples']} samples ({summary['share_of_all_samples_pct']}% of all)")
    for kind in ("inclusive", "self"):
        print(f"-- {kind}")
        for row in summary[kind]:
            print(f"{row['pct']:6.1f}%  {row['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
