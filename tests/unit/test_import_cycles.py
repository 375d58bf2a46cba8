"""No import cycle among Sluice's modules (issue 40, 4): not at import time, not behind
`TYPE_CHECKING`, not through an import inside a function. The names two modules shared
live in modules of their own (`WorkerContext`, `decisions`, `TickResult`, the DAG a task
sees, a wake-up's news)."""

from __future__ import annotations

import grimp


def test_no_module_reaches_itself_through_its_imports() -> None:
    graph = grimp.build_graph("sluice", cache_dir=None)
    assert len(graph.modules) > 100  # the whole package was read
    circles = sorted(
        f"{module} -> {imported} -> ... -> {module}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(importer=imported, imported=module)
    )
    assert circles == []
