"""`broker.worker.task_env`: which variables a task loses, and what its logs mask."""

from __future__ import annotations

import pytest

from sluice.broker.worker.task_env import Masker, hide_secrets, masked_error, secret_values
from sluice.scheduler.core.settings import ConfigError, Settings

DB = "postgresql+psycopg://app:p%40ss%2Fword@db.internal:5432/sluice"
BROKER = "redis://:brokerpass@redis.internal:6379/0"


def test_the_secret_variables_leave_the_environment_unless_allowed() -> None:
    environ = {
        "SLUICE_DATABASE_URL": DB,
        "SLUICE_BROKER_URL": BROKER,
        "SLUICE_API_TOKEN": "tok-123456",
        "SLUICE_WAKEUP_URL": BROKER,
        "SLUICE_NAMESPACE": "prod",
        "SLUICE_WEBHOOK_URL": "https://hooks.example/x",
        "HOME": "/root",
    }
    settings = Settings.from_env({"SLUICE_TASK_ENV_ALLOW": "SLUICE_WAKEUP_URL"})
    hide_secrets(settings, environ)
    assert environ == {
        "SLUICE_WAKEUP_URL": BROKER,
        "SLUICE_NAMESPACE": "prod",
        "SLUICE_WEBHOOK_URL": "https://hooks.example/x",
        "HOME": "/root",
    }


def test_the_urls_their_passwords_and_the_token_are_masked() -> None:
    settings = Settings(database_url=DB, broker_url=BROKER)
    mask = Masker(secret_values(settings, {"SLUICE_API_TOKEN": "tok-123456"}))
    assert mask(f"connecting to {DB} now") == "connecting to *** now"
    assert mask("password p@ss/word, encoded p%40ss%2Fword") == "password ***, encoded ***"
    assert mask("redis://:brokerpass@elsewhere:1/2") == "redis://:***@elsewhere:1/2"
    assert mask("Bearer tok-123456") == "Bearer ***"
    assert mask("nothing secret") == "nothing secret"


def test_short_values_are_not_masked() -> None:
    """A password of three characters would mask common words everywhere: it is left."""
    settings = Settings(database_url="postgresql://u:abc@h/d", broker_url="memory://")
    mask = Masker(secret_values(settings, {}))
    assert mask("abc and postgresql://u:abc@h/d") == "abc and ***"


def test_a_stored_error_is_masked() -> None:
    settings = Settings(broker_url=BROKER)
    values = {"error": "ConnectionError: redis://:brokerpass@redis.internal:6379/0 refused"}
    assert masked_error(settings, values) == {"error": "ConnectionError: *** refused"}
    assert masked_error(settings, {"error": None}) == {"error": None}


def test_the_allow_list_names_only_secret_variables() -> None:
    with pytest.raises(ConfigError, match="SLUICE_TASK_ENV_ALLOW names SLUICE_DATABSE_URL"):
        Settings.from_env({"SLUICE_TASK_ENV_ALLOW": "SLUICE_DATABSE_URL"})
    allowed = Settings.from_env({"SLUICE_TASK_ENV_ALLOW": "SLUICE_API_TOKEN, SLUICE_BROKER_URL"})
    assert allowed.task_env_allow == {"SLUICE_API_TOKEN", "SLUICE_BROKER_URL"}


def test_the_passwords_of_the_connections_in_the_environment_are_masked() -> None:
    settings = Settings(broker_url="memory://")
    environ = {"SLUICE_CONN_WAREHOUSE": "postgresql://etl:w%40rehouse-pw@wh:5432/dw"}
    mask = Masker(secret_values(settings, environ))
    assert mask("password w@rehouse-pw") == "password ***"
    assert mask(environ["SLUICE_CONN_WAREHOUSE"]) == "postgresql://etl:***@wh:5432/dw"
    assert mask("etl at wh") == "etl at wh"
