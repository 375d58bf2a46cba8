"""Task groups: ``with TaskGroup("extract"):``, ``@task_group``, and mapped task groups.

A group names a part of a DAG. Tasks (and groups) made inside its block get its id as a
prefix (``extract.load``; ``prefix_group_id=False`` leaves their ids to the enclosing
group, or as given at the top). A group links as its tasks do: ``g >> t`` makes each of
its leaves (its tasks with no downstream inside it) upstream of ``t``, ``t >> g`` ``t``
upstream of each of its roots (no upstream inside it); lists and other groups too.

``@task_group`` on a function that makes tasks: each call inside a DAG makes a group
named after the function (a second call ``name__1``, then ``name__2``, as Airflow) and
runs the function inside it. The call returns the group, or, when the function returns a
task's output (an ``Upstream``), that output as a ``GroupOutput``: passed to a task it is
that task's result, linked with ``>>``/``<<`` it is the group.

Mapped task groups, ``per_file.expand(path=list_files())`` (``partial(...)`` for the
fixed arguments): the function is called once, at definition time, with a placeholder
(``MappedArgument``) for each expanded argument, and the group's tasks are then compiled
onto per-index mapping (``tasks.mapping``), in the group's topological order:

- a task passed the group's arguments (each of them, as whole arguments) is mapped over
  the group's sources (``expand``; several give their cross product, as a task's);
- a task passed the output of one mapped task of the group (as a whole argument) is
  mapped one to one on it (``per_index``): its index i takes that task's index i result;
- a task that takes neither but follows one task of the group is mapped one to one on
  it without arguments (``MapSpec`` with no args, ``Task.follows_index``).

So index i of the group runs as a unit, depth-first: index i's second task starts when
index i's first task ends, and a failure in index i reaches only index i's tasks. A task
outside the group that takes the group's output gets the list of its results, as of a
mapped task. Not compiled (one line each): a task of the group taking none of the above
and following none of its tasks (it would run once, not per index), a task taking or
following two tasks of the group, or the group's arguments and a task of the group,
a shell, branch, Celery or already mapped task inside a mapped group.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, overload

from sluice.tasks.arguments import Upstream, referenced, references
from sluice.tasks.dag import DAG
from sluice.tasks.dag_context import current_dag, current_group, enter_group, leave_group
from sluice.tasks.errors import DagDefinitionError
from sluice.tasks.mapping import DEFAULT_MAX_MAP_LENGTH, PRODUCT, MapSpec, reference_of
from sluice.tasks.task import Task

_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class TaskGroup:
    """A named part of a DAG; a context manager whose tasks get its id as a prefix."""

    def __init__(
        self,
        group_id: str,
        prefix_group_id: bool = True,
        tooltip: str | None = None,
        description: str | None = None,
        *,
        dag: DAG | None = None,
    ) -> None:
        found = dag if dag is not None else current_dag()
        if not isinstance(found, DAG):
            raise DagDefinitionError(
                f"task group {group_id!r} is defined outside a DAG: create it inside "
                "'with DAG(...):'"
            )
        if (
            not isinstance(group_id, str)
            or not group_id
            or len(group_id) > 200
            or not set(group_id) <= _LABEL_CHARS
        ):
            raise DagDefinitionError(
                f"invalid task group id {group_id!r} in DAG '{found.dag_id}': use 1-200 "
                "letters, digits, '_' or '-' (a '.' joins a group's id to its tasks')"
            )
        self.dag: DAG = found
        self.parent: TaskGroup | None = _group_of(current_group(found))
        self.label = group_id
        """The id as given; `group_id` is the whole id (``outer.inner``)."""
        self.group_id = self.parent.child_id(group_id) if self.parent else group_id
        self.prefix_group_id = bool(prefix_group_id)
        self.tooltip = tooltip if tooltip is not None else description
        self.map: MapSpec | None = None
        """Of a mapped group (``expand``): its sources, as a mapped task's."""
        self._tasks: list[Task] = []
        self.groups: list[TaskGroup] = []
        """Its groups, in definition order."""
        if self.group_id in found.task_groups:
            raise DagDefinitionError(
                f"duplicate task group id '{self.group_id}' in DAG '{found.dag_id}'"
            )
        if self.group_id in found.tasks:
            raise DagDefinitionError(
                f"task group id '{self.group_id}' in DAG '{found.dag_id}' is the id of a task"
            )
        found.task_groups[self.group_id] = self
        if self.parent is not None:
            self.parent.groups.append(self)

    def __repr__(self) -> str:
        return f"<TaskGroup {self.dag.dag_id}.{self.group_id}>"

    def __enter__(self) -> TaskGroup:
        enter_group(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        leave_group(self)

    def child_id(self, label: str) -> str:
        """The id a task or group named `label` made inside this group gets."""
        if self.prefix_group_id:
            return f"{self.group_id}.{label}"
        return self.parent.child_id(label) if self.parent is not None else label

    def add_task(self, task: Any) -> None:
        """A task made inside the group's block joins it (``Task.__init__``)."""
        self._tasks.append(task)

    @property
    def own_tasks(self) -> list[Task]:
        """Its tasks, not those of its groups, in definition order."""
        return list(self._tasks)

    @property
    def tasks(self) -> list[Task]:
        """Its tasks and its groups' tasks, in definition order."""
        mine: set[str] = set()
        stack = [self]
        while stack:
            group = stack.pop()
            mine.update(t.task_id for t in group._tasks)
            stack.extend(group.groups)
        return [t for t in self.dag.tasks.values() if t.task_id in mine]

    @property
    def roots(self) -> list[Task]:
        """Its tasks (its groups' included) with no upstream inside it."""
        tasks = self.tasks
        ids = {t.task_id for t in tasks}
        return [t for t in tasks if not t.upstream_task_ids & ids]

    @property
    def leaves(self) -> list[Task]:
        """Its tasks (its groups' included) with no downstream inside it."""
        tasks = self.tasks
        ids = {t.task_id for t in tasks}
        return [t for t in tasks if not t.downstream_task_ids & ids]

    def link_tasks(self, downstream: bool) -> list[Task]:
        """The tasks the group stands for in a link: its roots on the downstream side
        (``t >> g``), its leaves on the upstream side (``g >> t``)."""
        found = self.roots if downstream else self.leaves
        if not found:
            raise DagDefinitionError(
                f"task group '{self.group_id}' of DAG '{self.dag.dag_id}' has no tasks to link"
            )
        return found

    def set_downstream(self, other: Any) -> None:
        """Make `other` (a task, output, group, or a list of them) run after the leaves."""
        for leaf in self.link_tasks(downstream=False):
            leaf.set_downstream(other)

    def set_upstream(self, other: Any) -> None:
        """Make `other` (a task, output, group, or a list of them) run before the roots."""
        for root in self.link_tasks(downstream=True):
            root.set_upstream(other)

    def __rshift__(self, other: Any) -> Any:
        self.set_downstream(other)
        return other

    def __lshift__(self, other: Any) -> Any:
        self.set_upstream(other)
        return other

    def __rrshift__(self, other: Any) -> TaskGroup:
        """``[a, b] >> group``."""
        self.set_upstream(other)
        return self

    def __rlshift__(self, other: Any) -> TaskGroup:
        """``[a, b] << group``."""
        self.set_downstream(other)
        return self


def _group_of(owner: object) -> TaskGroup | None:
    return owner if isinstance(owner, TaskGroup) else None


class GroupOutput(Upstream):
    """What a ``@task_group`` function's call returns when the function returns a task's
    output: that output for a task's arguments, the group for ``>>`` and ``<<``."""

    __slots__ = ("group",)

    def __init__(self, task_id: str, group: TaskGroup) -> None:
        super().__init__(task_id)
        self.group = group

    def __repr__(self) -> str:
        return f"GroupOutput({self.task_id!r}, group={self.group.group_id!r})"

    def link_tasks(self, downstream: bool) -> list[Task]:
        return self.group.link_tasks(downstream)

    def __rshift__(self, other: Any) -> Any:
        return self.group >> other

    def __lshift__(self, other: Any) -> Any:
        return self.group << other

    def __rrshift__(self, other: Any) -> Any:
        return other >> self.group

    def __rlshift__(self, other: Any) -> Any:
        return other << self.group


class MappedArgument:
    """The placeholder a mapped group's function is called with for an expanded
    argument: pass it to the group's tasks, as a whole argument."""

    __slots__ = ("group_id", "name")

    def __init__(self, name: str, group_id: str) -> None:
        self.name = name
        self.group_id = group_id

    def __repr__(self) -> str:
        return f"<mapped argument {self.name!r} of task group '{self.group_id}'>"


_Fn = Callable[..., Any]


class _GroupFunction:
    """A ``@task_group`` function: each call makes a group (see the module docstring)."""

    def __init__(self, fn: _Fn, options: dict[str, Any]) -> None:
        if not callable(fn):
            raise DagDefinitionError(f"@task_group decorates a function, got {fn!r}")
        unknown = sorted(set(options) - {"group_id", "prefix_group_id", "tooltip", "description"})
        if unknown:
            raise DagDefinitionError(f"@task_group: unknown option(s) {', '.join(unknown)}")
        self.function = fn
        self.options = options
        self.__name__ = getattr(fn, "__name__", "task_group")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"<task_group {self.__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> TaskGroup | GroupOutput:
        group = self._new_group()
        with group:
            returned = self.function(*args, **kwargs)
        return _output(group, returned)

    def partial(self, **kwargs: Any) -> _GroupPartial:
        """The fixed arguments of a mapped group: ``g.partial(table="raw").expand(...)``."""
        return _GroupPartial(self, kwargs)

    def expand(self, **kwargs: Any) -> TaskGroup | GroupOutput:
        """Map the group: index i runs the group's tasks with item i of each argument's
        list (their cross product when several are named), depth-first."""
        return _GroupPartial(self, {}).expand(**kwargs)

    def _new_group(self) -> TaskGroup:
        dag = current_dag()
        name = str(self.options.get("group_id") or self.__name__)
        if not isinstance(dag, DAG):
            raise DagDefinitionError(
                f"task group '{name}' is called outside a DAG: call it inside 'with DAG(...):'"
            )
        parent = _group_of(current_group(dag))
        label, n = name, 0
        while (parent.child_id(label) if parent else label) in dag.task_groups:
            n += 1
            label = f"{name}__{n}"
        return TaskGroup(
            label,
            prefix_group_id=self.options.get("prefix_group_id", True),
            tooltip=self.options.get("tooltip"),
            description=self.options.get("description"),
            dag=dag,
        )


class _GroupPartial:
    def __init__(self, function: _GroupFunction, kwargs: dict[str, Any]) -> None:
        self._function = function
        self._kwargs = dict(kwargs)

    def expand(self, **sources: Any) -> TaskGroup | GroupOutput:
        """See ``_GroupFunction.expand``."""
        name = self._function.__name__
        if not sources:
            raise DagDefinitionError(f"task group '{name}': expand() needs an argument to map")
        both = sorted(set(self._kwargs) & set(sources))
        if both:
            raise DagDefinitionError(
                f"task group '{name}': {', '.join(both)} given to both partial() and expand()"
            )
        for arg, source in sources.items():
            if reference_of(source) is None and not isinstance(source, list | tuple | dict):
                raise DagDefinitionError(
                    f"task group '{name}': expand({arg}=...) takes a list, a dict or a "
                    f"task's output, got {type(source).__name__}"
                )
        try:
            inspect.signature(self._function.function).bind(**self._kwargs, **sources)
        except TypeError as exc:
            raise DagDefinitionError(
                f"task group '{name}' is expanded with bad arguments: {exc}"
            ) from None
        except ValueError:
            pass
        group = self._function._new_group()
        group.map = MapSpec(PRODUCT, tuple(sources.items()))
        placeholders = {arg: MappedArgument(arg, group.group_id) for arg in sources}
        with group:
            returned = self._function.function(**self._kwargs, **placeholders)
        mine = {t.task_id for t in group.tasks}
        for t in group.dag.tasks.values():
            if t.task_id not in mine and t.bound_call is not None:
                values = [*t.bound_call[0], *t.bound_call[1].values()]
                if any(isinstance(v, MappedArgument) or _nested_placeholder(v) for v in values):
                    raise DagDefinitionError(
                        f"task '{t.task_id}' is passed an argument of mapped task group "
                        f"'{group.group_id}' but was made outside it: define it (@task) "
                        "inside the group's function"
                    )
        _compile_mapped(group)
        return _output(group, returned)


def _output(group: TaskGroup, returned: Any) -> TaskGroup | GroupOutput:
    if isinstance(returned, Upstream):
        return GroupOutput(returned.task_id, group)
    return group


class _TaskGroupDecorator:
    """``@task_group`` and ``@task_group(group_id=..., prefix_group_id=..., tooltip=...)``."""

    @overload
    def __call__(self, fn: _Fn, /) -> _GroupFunction: ...
    @overload
    def __call__(self, fn: None = None, /, **options: Any) -> Callable[[_Fn], _GroupFunction]: ...
    def __call__(
        self, fn: _Fn | None = None, /, **options: Any
    ) -> _GroupFunction | Callable[[_Fn], _GroupFunction]:
        if fn is not None:
            if options:
                raise DagDefinitionError("use @task_group(...) with keyword options only")
            return _GroupFunction(fn, {})
        return lambda f: _GroupFunction(f, dict(options))


task_group = _TaskGroupDecorator()


# --- compiling a mapped group onto per-index mapping ------------------------------------


def _compile_mapped(group: TaskGroup) -> None:
    """Map the tasks of mapped `group` (see the module docstring), in topological order."""
    assert group.map is not None
    mapped: set[str] = set()
    for task in _topological(group.tasks):
        where = f"task '{task.task_id}' of mapped task group '{group.group_id}'"
        if task.kind != "python" or task.python_callable is None or task.is_branch:
            kind = "branch" if task.is_branch else task.kind
            raise DagDefinitionError(f"{where} is a {kind} task, which cannot be mapped")
        if task.map is not None:
            raise DagDefinitionError(
                f"{where} is mapped itself: a mapped group's tasks are mapped by the group"
            )
        named = _named_arguments(task, where)
        direct = {n: v for n, v in named.items() if isinstance(v, MappedArgument)}
        if any(_nested_placeholder(v) for v in named.values()):
            raise DagDefinitionError(
                f"{where} is passed the group's argument inside a list or dict: pass it "
                "as a whole argument"
            )
        ref_args = {n: referenced(v) for n, v in named.items() if referenced(v) in mapped}
        refs = {r for r in references(list(named.values())) if r in mapped}
        follows = task.upstream_task_ids & mapped
        if direct:
            _map_over_sources(task, group, named, direct, refs | follows, where)
        elif refs:
            if len(refs) > 1 or len(follows) > 1 or len(ref_args) != 1:
                raise DagDefinitionError(
                    f"{where} takes the output of {', '.join(sorted(follows | refs))}: a task "
                    "of a mapped group takes (or follows) one task of the group, as a whole "
                    "argument"
                )
            ((arg, ref),) = ref_args.items()
            fixed = {n: v for n, v in named.items() if n != arg}
            _set_map(task, fixed, MapSpec(PRODUCT, ((arg, Upstream(str(ref))),)), None)
        elif follows:
            if len(follows) > 1:
                raise DagDefinitionError(
                    f"{where} follows {', '.join(sorted(follows))}: a task of a mapped group "
                    "follows one task of the group"
                )
            _set_map(task, named, MapSpec(PRODUCT, ()), next(iter(follows)))
        else:
            raise DagDefinitionError(
                f"{where} takes none of the group's arguments and follows no task of the "
                "group: it would run once, not once per index"
            )
        mapped.add(task.task_id)


def _map_over_sources(
    task: Task,
    group: TaskGroup,
    named: dict[str, Any],
    direct: dict[str, MappedArgument],
    others: set[str],
    where: str,
) -> None:
    assert group.map is not None
    if others:
        raise DagDefinitionError(
            f"{where} takes the group's arguments and follows {', '.join(sorted(others))} "
            "of the group: it takes one or the other"
        )
    taken = {placeholder.name: arg for arg, placeholder in direct.items()}
    missing = [name for name, _ in group.map.args if name not in taken]
    if missing or len(taken) != len(direct):
        raise DagDefinitionError(
            f"{where} must take each of the group's mapped arguments once "
            f"({', '.join(name for name, _ in group.map.args)}), as whole arguments"
        )
    limit = task.max_map_length or DEFAULT_MAX_MAP_LENGTH
    for name, source in group.map.args:
        if reference_of(source) is None and len(source) > limit:
            raise DagDefinitionError(
                f"{where}: expand({name}=...) has {len(source)} items, more than "
                f"max_map_length {limit}"
            )
    args = tuple((taken[name], source) for name, source in group.map.args)
    fixed = {n: v for n, v in named.items() if n not in direct}
    _set_map(task, fixed, MapSpec(PRODUCT, args), None)


def _set_map(task: Task, fixed: dict[str, Any], spec: MapSpec, follows: str | None) -> None:
    """Make `task` mapped: `fixed` are its arguments by name, `spec` its mapping."""
    task.bound_call = ((), fixed)
    task.map = spec
    task.follows_index = follows
    task._link_references([list(fixed.values()), [source for _, source in spec.args]])


def _named_arguments(task: Task, where: str) -> dict[str, Any]:
    """The task's bound call, every argument by its parameter's name."""
    if task.bound_call is None:
        return {}
    args, kwargs = task.bound_call
    if not args:
        return dict(kwargs)
    assert task.python_callable is not None
    signature = inspect.signature(task.python_callable)
    params = [p for n, p in signature.parameters.items() if n != "context"]
    bound = signature.replace(parameters=params).bind(*args, **kwargs)
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            raise DagDefinitionError(
                f"{where} is passed arguments by position to a parameter that takes "
                f"no name ({name}): a mapped group's tasks are called by name"
            )
        else:
            named[name] = value
    return named


def _nested_placeholder(value: Any, top: bool = True) -> bool:
    if isinstance(value, MappedArgument):
        return not top
    if isinstance(value, list | tuple):
        return any(_nested_placeholder(v, False) for v in value)
    if isinstance(value, dict):
        return any(_nested_placeholder(v, False) for v in value.values())
    return False


def _topological(tasks: Iterable[Task]) -> list[Task]:
    """`tasks` ordered so a task comes after its upstreams among them (definition order
    otherwise; a cycle's tasks last, for ``DAG.validate`` to name)."""
    pending = list(tasks)
    ids = {t.task_id for t in pending}
    done: set[str] = set()
    ordered: list[Task] = []
    while pending:
        ready = [t for t in pending if not (t.upstream_task_ids & ids) - done]
        if not ready:
            ordered.extend(pending)
            break
        for t in ready:
            ordered.append(t)
            done.add(t.task_id)
        pending = [t for t in pending if t.task_id not in done]
    return ordered


# --- the serialized form ----------------------------------------------------------------


def groups_json(dag: DAG, to_json: Callable[[Any], Any]) -> dict[str, Any] | None:
    """The DAG's groups as serialized (None when it has none): by id, each its ``parent``
    (null at the top), its own ``tasks`` (its groups' are theirs), ``tooltip`` when set,
    and for a mapped group ``map`` (``mapping.map_json``: its sources)."""
    if not dag.task_groups:
        return None
    found: dict[str, Any] = {}
    for group_id, group in dag.task_groups.items():
        spec: dict[str, Any] = {
            "parent": group.parent.group_id if group.parent is not None else None,
            "tasks": [t.task_id for t in group.own_tasks],
        }
        if group.tooltip:
            spec["tooltip"] = group.tooltip
        if group.map is not None:
            spec["map"] = {
                "mode": group.map.mode,
                "args": [[name, to_json(source)] for name, source in group.map.args],
            }
        found[group_id] = spec
    return found


def group_task_ids(groups: Mapping[str, Any], group_id: str) -> list[str]:
    """The task ids of serialized group `group_id`, its groups' (nested) included, in
    the order of ``groups``; empty for an unknown id."""
    if group_id not in groups:
        return []
    inside = {group_id}
    for gid, spec in groups.items():  # parents come before their groups
        if spec.get("parent") in inside:
            inside.add(gid)
    return [tid for gid in groups if gid in inside for tid in groups[gid].get("tasks", [])]
