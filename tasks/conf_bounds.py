"""The bounds of a run's conf that Sluice itself makes runs from (`conf_problem`): a
`TriggerDagRun`'s conf (checked at definition, and again by the triggerer against the
deployment's settings) and a watch's run requests (`tasks.watching`). The CLI and the
API check a conf a person gives with `scheduler.control.inputs.check_conf`, which also
says where in the conf the problem is.
"""

from __future__ import annotations

import json
import math
from typing import Any


def conf_problem(conf: Any, max_bytes: int, max_depth: int) -> str | None:
    """Why `conf` may not be a run's conf (one line), or None: a JSON object (text keys;
    text without NUL, finite numbers, lists and objects as values) at most `max_depth`
    levels deep (the object is level 1) and `max_bytes` bytes of compact UTF-8 JSON.
    Walked without recursion."""
    if not isinstance(conf, dict):
        return f"conf must be a dict, got {type(conf).__name__}"
    stack: list[tuple[int, Any]] = [(1, conf)]
    while stack:
        depth, value = stack.pop()
        if isinstance(value, dict | list | tuple):
            if depth > max_depth:
                return f"conf is nested more than {max_depth} levels deep"
            if isinstance(value, dict):
                for key in value:
                    if not isinstance(key, str):
                        return f"conf's keys must be text, got {type(key).__name__}"
                    stack.append((depth, key))
                stack.extend((depth + 1, item) for item in value.values())
            else:
                stack.extend((depth + 1, item) for item in value)
        elif isinstance(value, str):
            if "\x00" in value:
                return "conf must not contain NUL characters"
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "conf must be valid UTF-8 text"
        elif isinstance(value, float) and not math.isfinite(value):
            return "conf must not contain NaN or Infinity"
        elif not (value is None or isinstance(value, bool | int | float)):
            return f"conf's {type(value).__name__} is not a JSON value"
    size = len(json.dumps(conf, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > max_bytes:
        return f"conf is {size} bytes of JSON; at most {max_bytes} are allowed"
    return None
