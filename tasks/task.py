"""Tasks, their options, dependencies (``>>``/``<<``) and the ``@task`` decorator.

Invariants: a task belongs to exactly one DAG (``dag``), set at construction from the
innermost ``with DAG`` block; options are validated and normalised here (timedeltas,
``TriggerRule``); explicit options win over the DAG's ``default_args``, which win over
``TASK_DEFAULTS``; ``upstream_task_ids``/``downstream_task_ids`` mirror each other.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar, overload

from sluice.tasks.arguments import Upstream, references, task_of
from sluice.tasks.assets import Asset, check_outlets
from sluice.tasks.callbacks import TASK_KINDS, Callback, check_callback
from sluice.tasks.dag_context import DAG_ID_RE, GroupOwner, TaskOwner, current_dag, current_group
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.limits import Concurrency, RateLimit, check_concurrency, check_rate_limit
from sluice.tasks.mapping import DEFAULT_MAX_MAP_LENGTH, KWARGS, PRODUCT, MapSpec, reference_of
from sluice.tasks.sensor import SensorOptions, sensor_options
from sluice.tasks.trigger_rules import TriggerRule

#: Options every task has, with their defaults (a DAG's default_args may override them).
TASK_DEFAULTS: dict[str, Any] = {
    "retries": 0,
    "retry_delay": timedelta(seconds=300),
    "retry_exponential_backoff": False,
    "max_retry_delay": None,
    "execution_timeout": None,
    "queued_timeout": None,
    "queue": "default",
    "pool": None,
    "pool_slots": 1,
    "priority_weight": 1,
    "trigger_rule": TriggerRule.ALL_SUCCESS,
    "on_success_callback": None,
    "on_failure_callback": None,
    "on_retry_callback": None,
    "max_map_length": None,
    "max_active_tis_per_dagrun": None,
    "outlets": None,
    "concurrency": None,
    "rate_limit": None,
}

_Deps = TypeVar(
    "_Deps",
    bound="Task | Upstream | list[Task] | list[Task | Upstream] | tuple[Task, ...] | set[Task]",
)


def _as_timedelta(name: str, value: Any, *, optional: bool, positive: bool) -> timedelta | None:
    if value is None and optional:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            value = timedelta(seconds=value)
        except (ValueError, OverflowError):  # NaN, infinities, beyond timedelta's range
            raise DagDefinitionError(f"{name} must be a finite number of seconds") from None
    if not isinstance(value, timedelta):
        raise DagDefinitionError(f"{name} must be a timedelta, got {value!r}")
    if value < timedelta(0) or (positive and value == timedelta(0)):
        raise DagDefinitionError(f"{name} must be {'positive' if positive else '>= 0'}")
    return value


def _as_int(name: str, value: Any, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DagDefinitionError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise DagDefinitionError(f"{name} must be >= {minimum}, got {value}")
    return value


def _resolve_options(
    task_id: str, dag: TaskOwner[Task], explicit: dict[str, Any]
) -> dict[str, Any]:
    """Merge defaults, the DAG's default_args (unknown keys ignored) and explicit options."""
    unknown = sorted(set(explicit) - set(TASK_DEFAULTS))
    if unknown:
        raise DagDefinitionError(f"task '{task_id}': unknown option(s) {', '.join(unknown)}")
    merged = dict(TASK_DEFAULTS)
    merged.update({k: v for k, v in dag.default_args.items() if k in TASK_DEFAULTS})
    merged.update(explicit)
    try:
        merged["trigger_rule"] = TriggerRule(merged["trigger_rule"])
    except ValueError:
        rules = ", ".join(TriggerRule)
        raise DagDefinitionError(
            f"task '{task_id}': unknown trigger_rule {merged['trigger_rule']!r} (use {rules})"
        ) from None
    try:
        merged["retries"] = _as_int("retries", merged["retries"], 0)
        merged["pool_slots"] = _as_int("pool_slots", merged["pool_slots"], 1)
        merged["priority_weight"] = _as_int("priority_weight", merged["priority_weight"], None)
        merged["retry_delay"] = _as_timedelta(
            "retry_delay", merged["retry_delay"], optional=False, positive=False
        )
        for name in ("max_retry_delay", "execution_timeout", "queued_timeout"):
            merged[name] = _as_timedelta(name, merged[name], optional=True, positive=True)
        for name in ("max_map_length", "max_active_tis_per_dagrun"):
            if merged[name] is not None:
                merged[name] = _as_int(name, merged[name], 1)
        for name in ("queue", "pool"):
            value = merged[name]
            if not (value is None and name == "pool") and (not isinstance(value, str) or not value):
                raise DagDefinitionError(f"{name} must be a non-empty string, got {value!r}")
        for name in TASK_KINDS:
            merged[name] = check_callback(name, merged[name])
        merged["outlets"] = check_outlets(task_id, merged["outlets"])
        merged["concurrency"] = check_concurrency(merged["concurrency"])
        merged["rate_limit"] = check_rate_limit(merged["rate_limit"])
    except DagDefinitionError as exc:
        raise DagDefinitionError(f"task '{task_id}': {exc}") from None
    merged["retry_exponential_backoff"] = bool(merged["retry_exponential_backoff"])
    return merged


def _check_binding(
    task_id: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    partial: bool = False,
) -> None:
    """DagDefinitionError unless `fn` accepts `args`/`kwargs` (its `context` parameter, which
    the worker fills, left out); with `partial`, some may be missing (given later)."""
    if "context" in kwargs:
        raise DagDefinitionError(f"task '{task_id}': `context` is passed by the worker")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = [p for name, p in signature.parameters.items() if name != "context"]
    try:
        bound = signature.replace(parameters=params)
        (bound.bind_partial if partial else bound.bind)(*args, **kwargs)
    except TypeError as exc:
        raise DagDefinitionError(f"task '{task_id}' is called with bad arguments: {exc}") from None


def _as_tasks(other: object, downstream: bool = True) -> list[Task]:
    """The tasks `other` names: a task, a task's result (`Upstream`), a task group, or a
    list of them. A group (anything with ``link_tasks``, `task_group.TaskGroup`) stands
    for its roots on the `downstream` side of a link, for its leaves upstream."""
    items = list(other) if isinstance(other, list | tuple | set | frozenset) else [other]
    found: list[Task] = []
    for item in items:
        link_tasks = getattr(item, "link_tasks", None)
        if callable(link_tasks):
            found.extend(link_tasks(downstream))
            continue
        if isinstance(item, Upstream):
            item = task_of(item)
        if not isinstance(item, Task):
            raise TypeError(f"dependencies link tasks, got {type(item).__name__}: {item!r}")
        found.append(item)
    return found


def _link(up: Task, down: Task) -> None:
    if up.dag is not down.dag:
        raise DagDefinitionError(
            f"cannot link task '{up.task_id}' of DAG '{up.dag.dag_id}' to task "
            f"'{down.task_id}' of DAG '{down.dag.dag_id}': tasks must be in the same DAG"
        )
    if up is down:
        raise DagDefinitionError(f"cycle in DAG '{up.dag.dag_id}': {up.task_id} >> {up.task_id}")
    up.downstream_task_ids.add(down.task_id)
    down.upstream_task_ids.add(up.task_id)


class Task:
    """One unit of work in a DAG: a Python callable (``kind == "python"``) or a shell command."""

    kind: str = "python"

    def __init__(
        self,
        task_id: str,
        *,
        python_callable: Callable[..., Any] | None = None,
        is_branch: bool = False,
        dag: TaskOwner[Task] | None = None,
        **options: Any,
    ) -> None:
        dag = dag if dag is not None else current_dag()
        if dag is None:
            raise DagDefinitionError(
                f"task '{task_id}' is defined outside a DAG: create it inside 'with DAG(...):'"
            )
        if not isinstance(task_id, str) or not DAG_ID_RE.match(task_id):
            raise DagDefinitionError(
                f"invalid task_id {task_id!r} in DAG '{dag.dag_id}': "
                "use 1-250 letters, digits, '_', '.' or '-', not only dots"
            )
        group = current_group(dag)
        if group is not None:  # made inside a task group: its id gets the group's prefix
            task_id = group.child_id(task_id)
            if not DAG_ID_RE.match(task_id):
                raise DagDefinitionError(
                    f"invalid task_id {task_id!r} in DAG '{dag.dag_id}': "
                    "use 1-250 letters, digits, '_', '.' or '-', not only dots"
                )
        if self.kind == "python" and not callable(python_callable):
            raise DagDefinitionError(f"task '{task_id}' needs a python_callable")
        opts = _resolve_options(task_id, dag, options)
        self.task_id = task_id
        self.dag: TaskOwner[Task] = dag
        self.python_callable = python_callable
        self.command: str | None = None
        self.is_branch = bool(is_branch)
        self.retries: int = opts["retries"]
        self.retry_delay: timedelta = opts["retry_delay"]
        self.retry_exponential_backoff: bool = opts["retry_exponential_backoff"]
        self.max_retry_delay: timedelta | None = opts["max_retry_delay"]
        self.execution_timeout: timedelta | None = opts["execution_timeout"]
        self.queued_timeout: timedelta | None = opts["queued_timeout"]
        """Schedule-to-start: a try no worker started within it after its queueing is
        failed or retried (a re-publish of its message does not extend it)."""
        self.queue: str = opts["queue"]
        self.pool: str | None = opts["pool"]
        self.pool_slots: int = opts["pool_slots"]
        self.priority_weight: int = opts["priority_weight"]
        self.trigger_rule: TriggerRule = opts["trigger_rule"]
        self.callbacks: dict[str, Callback | None] = {name: opts[name] for name in TASK_KINDS}
        """Option name (`on_failure_callback`, …) → the callback set, or None."""
        self.upstream_task_ids: set[str] = set()
        self.downstream_task_ids: set[str] = set()
        self.bound_call: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        """The arguments the function is called with (``task(...)`` in the DAG, or the
        ``partial`` ones of a mapped task), or None."""
        self.map: MapSpec | None = None
        """Set by ``expand``/``expand_kwargs``: the task is mapped (``sluice.tasks.mapping``)."""
        self.max_map_length: int | None = opts["max_map_length"]
        """Most indexes the task may expand to (None: ``DEFAULT_MAX_MAP_LENGTH``; the
        deployment's ``SLUICE_MAX_MAP_LENGTH`` caps it)."""
        self.max_active_tis_per_dagrun: int | None = opts["max_active_tis_per_dagrun"]
        """Most of the task's TIs (its indexes) queued or running at once in one run."""
        self.sensor: SensorOptions | None = None
        """Set by ``@task.sensor``: the function pokes (``sluice.tasks.sensor``)."""
        self.outlets: tuple[Asset, ...] = opts["outlets"]
        """The assets each success of the task records an event of (``tasks.assets``)."""
        self.concurrency: Concurrency | None = opts["concurrency"]
        """Slots per key across runs and DAGs (``tasks.limits``), or None."""
        self.rate_limit: RateLimit | None = opts["rate_limit"]
        """The token bucket each try takes one token of when queued, or None."""
        self.follows_index: str | None = None
        """Of a task of a mapped task group that takes no mapped argument but follows a
        task of the group: that task, whose index i its index i follows (``per_index``)."""
        self.task_group: GroupOwner | None = group
        """The innermost task group the task was made in (``task_group.TaskGroup``)."""
        dag.add_task(self)
        if group is not None:
            group.add_task(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Upstream:
        """Inside its DAG's ``with`` block: bind the arguments the task's function will be
        called with, once. An argument may be another task's output (``other()``, an
        ``Upstream``), anywhere in a list or dict: that task becomes an upstream of this
        one, and the worker passes its result. Returns this task's output."""
        if self.kind != "python" or self.python_callable is None:
            raise DagDefinitionError(
                f"'{self.task_id}' is a {self.kind} task: it takes no call arguments"
            )
        self._check_bindable("called")
        _check_binding(self.task_id, self.python_callable, args, kwargs)
        self._link_references([list(args), kwargs])
        self.bound_call = (tuple(args), dict(kwargs))
        return Upstream(self.task_id)

    def partial(self, **kwargs: Any) -> _Partial:
        """The fixed arguments of a mapped task: ``t.partial(table="raw").expand(path=...)``."""
        return _Partial(self, kwargs)

    def expand(self, **kwargs: Any) -> Upstream:
        """Map the task: one task instance per item of each named argument's list (a
        literal list or dict, or an upstream's output), their cross product when several
        are named. Returns the mapped task's output (its results as a list, in map-index
        order, to a task that takes it; one by one to a task expanded over it alone)."""
        return _Partial(self, {}).expand(**kwargs)

    def expand_kwargs(self, source: Any) -> Upstream:
        """Map the task over a list of dicts of arguments (literal, or an upstream's output)."""
        return _Partial(self, {}).expand_kwargs(source)

    def _check_bindable(self, how: str) -> None:
        if self.kind != "python" or self.python_callable is None:
            raise DagDefinitionError(
                f"'{self.task_id}' is a {self.kind} task: it takes no call arguments"
            )
        if current_dag() is not self.dag:
            raise DagDefinitionError(
                f"'{self.task_id}' is a task, not a function: call it inside its DAG's "
                "`with` block to pass it arguments (other tasks' outputs as `other()`), link "
                "it with >>, or call .python_callable to run the function"
            )
        if self.bound_call is not None or self.map is not None:
            raise DagDefinitionError(
                f"task '{self.task_id}' is {how} twice: a task's arguments are bound once "
                "(define another task, e.g. @task(task_id=...), for a second call)"
            )

    def _link_references(self, value: Any) -> None:
        for ref in sorted(set(references(value))):
            upstream = self.dag.tasks.get(ref)
            if upstream is None:
                raise DagDefinitionError(
                    f"task '{self.task_id}' is passed the output of '{ref}', which is not a "
                    f"task of DAG '{self.dag.dag_id}'"
                )
            if ref != self.task_id:
                _link(upstream, self)

    def _map(self, mode: str, partial: dict[str, Any], args: dict[str, Any]) -> Upstream:
        """Record the mapping (`expand`/`expand_kwargs` of `_Partial`)."""
        self._check_bindable("mapped")
        assert self.python_callable is not None
        if self.is_branch:
            raise DagDefinitionError(f"task '{self.task_id}': a branch task cannot be mapped")
        if not args:
            raise DagDefinitionError(f"task '{self.task_id}': expand() needs an argument to map")
        both = sorted(set(partial) & set(args))
        if both:
            raise DagDefinitionError(
                f"task '{self.task_id}': {', '.join(both)} given to both partial() and expand()"
            )
        limit = self.max_map_length or DEFAULT_MAX_MAP_LENGTH
        for name, source in args.items():
            call = "expand_kwargs(...)" if mode == KWARGS else f"expand({name}=...)"
            if reference_of(source) is not None:
                continue
            if not isinstance(source, list | tuple | dict):
                raise DagDefinitionError(
                    f"task '{self.task_id}': {call} takes a list, a dict or another "
                    f"task's output, got {type(source).__name__}"
                )
            if len(source) > limit:
                raise DagDefinitionError(
                    f"task '{self.task_id}': {call} has {len(source)} items, more "
                    f"than max_map_length {limit}"
                )
        fn = self.python_callable
        if mode == PRODUCT:
            _check_binding(self.task_id, fn, (), {**partial, **args})
        else:
            _check_binding(self.task_id, fn, (), partial, partial=True)
            source = args["*"]
            for item in source if isinstance(source, list | tuple) else ():
                _check_binding(self.task_id, fn, (), {**partial, **item})
        self._link_references([partial, list(args.values())])
        self.bound_call = ((), dict(partial))
        self.map = MapSpec(mode, tuple(args.items()))
        return Upstream(self.task_id)

    @property
    def per_index(self) -> str | None:
        """The mapped task this one maps one to one (it is expanded over that task's
        output alone: its index i takes that task's index i result), else None."""
        if self.map is not None and not self.map.args:
            return self.follows_index
        if self.map is None or self.map.mode != PRODUCT or len(self.map.args) != 1:
            return None
        ref = reference_of(self.map.args[0][1])
        source = self.dag.tasks.get(ref) if ref is not None else None
        return ref if source is not None and source.map is not None else None

    @property
    def reads_upstream(self) -> bool:
        """Whether running the task needs upstream results (its call arguments or its
        mapped arguments refer to some)."""
        call = list(self.bound_call) if self.bound_call is not None else []
        mapped = [source for _, source in self.map.args] if self.map is not None else []
        return any(references([call, mapped]))

    def set_downstream(self, other: Task | Upstream | Iterable[Task | Upstream]) -> None:
        """Make ``other`` (a task, a task's result, or a list of them) run after this task."""
        for down in _as_tasks(other, downstream=True):
            _link(self, down)

    def set_upstream(self, other: Task | Upstream | Iterable[Task | Upstream]) -> None:
        """Make ``other`` (a task, a task's result, or a list of them) run before this task."""
        for up in _as_tasks(other, downstream=False):
            _link(up, self)

    def __rshift__(self, other: _Deps) -> _Deps:
        self.set_downstream(other)
        return other

    def __lshift__(self, other: _Deps) -> _Deps:
        self.set_upstream(other)
        return other

    def __rrshift__(self, other: list[Task] | tuple[Task, ...] | set[Task]) -> Task:
        """``[a, b] >> self``."""
        self.set_upstream(other)
        return self

    def __rlshift__(self, other: list[Task] | tuple[Task, ...] | set[Task]) -> Task:
        """``[a, b] << self``."""
        self.set_downstream(other)
        return self


class _Partial:
    """A task with its fixed arguments (``task.partial(...)``), waiting for ``expand``."""

    def __init__(self, task: Task, kwargs: dict[str, Any]) -> None:
        self._task = task
        self._kwargs = dict(kwargs)

    def expand(self, **kwargs: Any) -> Upstream:
        """See ``Task.expand``."""
        return self._task._map(PRODUCT, self._kwargs, kwargs)

    def expand_kwargs(self, source: Any) -> Upstream:
        """See ``Task.expand_kwargs``: one dict of arguments per item of `source`."""
        literal = reference_of(source) is None
        if literal and (
            not isinstance(source, list | tuple) or not all(isinstance(i, dict) for i in source)
        ):
            raise DagDefinitionError(
                f"task '{self._task.task_id}': expand_kwargs() takes a list of dicts or "
                "another task's output"
            )
        return self._task._map(KWARGS, self._kwargs, {"*": source})


class ShellTask(Task):
    """A task that runs ``command`` with ``/bin/sh -c``; see ``tasks.shell`` for the contract."""

    kind = "shell"

    def __init__(
        self,
        task_id: str,
        command: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        dag: TaskOwner[Task] | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(command, str) or not command.strip():
            raise DagDefinitionError(f"shell task '{task_id}' needs a non-empty command string")
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise DagDefinitionError(f"shell task '{task_id}': env must map str to str")
        super().__init__(task_id, dag=dag, **options)
        self.command = command
        self.env: dict[str, str] = dict(env or {})
        self.cwd = cwd


_Fn = Callable[..., Any]


def _make_task(
    fn: _Fn, options: dict[str, Any], is_branch: bool, sensor: SensorOptions | None = None
) -> Task:
    if not callable(fn):
        raise DagDefinitionError(f"@task decorates a function, got {fn!r}")
    task_id: Any = options.pop("task_id", None) or getattr(fn, "__name__", "")
    made = Task(task_id, python_callable=fn, is_branch=is_branch, **options)
    made.sensor = sensor
    return made


class _TaskDecorator:
    """``@task``, ``@task(...)``, ``@task.branch``, ``@task.branch(...)``,
    ``@task.sensor(...)``: each returns a Task."""

    @overload
    def __call__(self, fn: _Fn, /) -> Task: ...
    @overload
    def __call__(self, fn: None = None, /, **options: Any) -> Callable[[_Fn], Task]: ...
    def __call__(self, fn: _Fn | None = None, /, **options: Any) -> Task | Callable[[_Fn], Task]:
        return self._decorate(fn, options, is_branch=False)

    @overload
    def branch(self, fn: _Fn, /) -> Task: ...
    @overload
    def branch(self, fn: None = None, /, **options: Any) -> Callable[[_Fn], Task]: ...
    def branch(self, fn: _Fn | None = None, /, **options: Any) -> Task | Callable[[_Fn], Task]:
        """A branch task returns the downstream task id(s) to follow; the others are skipped."""
        return self._decorate(fn, options, is_branch=True)

    def sensor(
        self,
        fn: _Fn | None = None,
        /,
        *,
        poke_interval: Any = 60.0,
        timeout: Any = 7 * 24 * 3600.0,
        mode: str = "poke",
        soft_fail: bool = False,
        exponential_backoff: bool = False,
        **options: Any,
    ) -> Any:
        """A sensor: the function returns a bool (or ``PokeReturnValue``) and is poked
        every ``poke_interval`` until true, for at most ``timeout`` (timedeltas or
        seconds). ``mode="reschedule"`` frees the worker and the pool slot between pokes
        (``sluice.tasks.sensor``). Takes every other task option."""
        checked = sensor_options(
            poke_interval=poke_interval,
            timeout=timeout,
            mode=mode,
            soft_fail=soft_fail,
            exponential_backoff=exponential_backoff,
        )
        if fn is not None:
            return _make_task(fn, dict(options), False, checked)
        return lambda f: _make_task(f, dict(options), False, checked)

    @staticmethod
    def _decorate(
        fn: _Fn | None, options: dict[str, Any], is_branch: bool
    ) -> Task | Callable[[_Fn], Task]:
        if fn is not None:
            if options:
                raise DagDefinitionError("use @task(...) with keyword options only")
            return _make_task(fn, {}, is_branch)
        return lambda f: _make_task(f, dict(options), is_branch)


task = _TaskDecorator()
