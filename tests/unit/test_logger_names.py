"""Loggers named by `__name__` (issue 40, 4): no logger shared by several modules, and a
level set on `sluice` or on any package under it reaches every module there."""

from __future__ import annotations

import importlib
import logging
import pkgutil

import sluice


def module_loggers() -> dict[str, str]:
    """Each Sluice module that has a module-level `log`: its logger's name."""
    found = {}
    for info in pkgutil.walk_packages(sluice.__path__, "sluice."):
        if ".migrations" in info.name:  # alembic's scripts run only under alembic
            continue
        logger = getattr(importlib.import_module(info.name), "log", None)
        if isinstance(logger, logging.Logger):
            found[info.name] = logger.name
    return found


def test_every_module_logs_on_the_logger_of_its_own_name() -> None:
    loggers = module_loggers()
    assert len(loggers) > 30  # the walk found the modules
    wrong = {module: name for module, name in loggers.items() if name != module}
    assert wrong == {}


def test_a_level_set_on_a_package_reaches_its_modules() -> None:
    """`sluice.broker.worker` at DEBUG: the heartbeat module's logger logs DEBUG (its name is
    under the package's), the scheduler's does not."""
    from sluice.broker.worker import heartbeat
    from sluice.scheduler.jobs import scheduler_job

    package = logging.getLogger("sluice.broker.worker")
    before = package.level
    package.setLevel(logging.DEBUG)
    try:
        assert heartbeat.log.isEnabledFor(logging.DEBUG)
        assert (
            scheduler_job.log.getEffectiveLevel() == logging.getLogger("sluice").getEffectiveLevel()
        )
    finally:
        package.setLevel(before)
