"""A worker's lookups (`broker.worker.secret_reads`): the environment, then the enabled
backends of the entry point group `sluice.secrets_backends`, then the database; and every
secret a try reads masked `***` in its log and error, in each form a log shows it."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.fernet import Fernet
from sqlalchemy.orm import Session, sessionmaker

from sluice.broker.worker.secret_reads import WorkerSecrets
from sluice.broker.worker.task_env import masked_error, masker_for
from sluice.broker.worker.task_logs import TaskLogCapture
from sluice.scheduler.cli.main import main
from sluice.scheduler.core.db import make_engine, make_session_factory, transaction, utcnow
from sluice.scheduler.core.fernet import box_of
from sluice.scheduler.core.secrets_backends import installed
from sluice.scheduler.core.secrets_store import add_connection, set_variable
from sluice.scheduler.core.settings import ConfigError, Settings
from sluice.tasks.secrets import (
    Connection,
    ConnectionNotFound,
    Variable,
    VariableNotFound,
    install_resolver,
)

KEY = Fernet.generate_key().decode()

BACKEND = """
class Backend:
    def get_connection(self, name):
        return {
            "both": "http://backend-host",
            "backend_only": "http://vault:vault-pw-123@vault-host",
        }.get(name)

    def get_variable(self, key):
        return {"both": "from-backend", "backend_only": "backend-secret-value"}.get(key)
"""


@pytest.fixture
def factory(sqlite_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(sqlite_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def backend_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed secrets backend (a distribution on sys.path with its entry point)."""
    name = f"fake_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    (site / f"{name}-1.0.dist-info").mkdir(parents=True)
    (site / f"{name}_module.py").write_text(textwrap.dedent(BACKEND))
    info = site / f"{name}-1.0.dist-info"
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[sluice.secrets_backends]\n{name} = {name}_module:Backend\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return name


@pytest.fixture
def resolver_installed() -> Iterator[None]:
    """The resolver a test installs is taken away after it."""
    previous = install_resolver(None)
    yield
    install_resolver(previous)


def store(factory: sessionmaker[Session], settings: Settings) -> None:
    box = box_of(settings)
    with transaction(factory) as session:
        for name in ("both", "db_only"):
            conn = Connection.from_uri(f"postgresql://db:db-pw-{name}@db-host/{name}")
            add_connection(session, box, name, conn, utcnow())
            set_variable(session, box, name, f"db-{name}", is_secret=True, now=utcnow())


def test_the_environment_then_the_backends_then_the_database(
    factory: sessionmaker[Session],
    backend_name: str,
    monkeypatch: pytest.MonkeyPatch,
    resolver_installed: None,
) -> None:
    settings = Settings(fernet_key=(KEY,), secrets_backends=(backend_name,))
    store(factory, settings)
    monkeypatch.setenv("SLUICE_CONN_BOTH", "http://env-host")
    monkeypatch.setenv("SLUICE_VAR_BOTH", "from-env")
    install_resolver(WorkerSecrets(factory, settings))

    assert Connection.get("both").host == "env-host"
    assert Variable.get("both") == "from-env"
    monkeypatch.delenv("SLUICE_CONN_BOTH")
    monkeypatch.delenv("SLUICE_VAR_BOTH")
    assert Connection.get("both").host == "backend-host"
    assert Variable.get("both") == "from-backend"
    assert Connection.get("backend_only").password == "vault-pw-123"
    assert Connection.get("db_only") == Connection.from_uri(
        "postgresql://db:db-pw-db_only@db-host/db_only"
    )
    assert Variable.get("db_only") == "db-db_only"
    assert Variable.get("nowhere", default="fallback") == "fallback"
    with pytest.raises(ConnectionNotFound, match="not in SLUICE_CONN_NOWHERE, the secrets"):
        Connection.get("nowhere")
    with pytest.raises(VariableNotFound, match="no variable 'nowhere'"):
        Variable.get("nowhere")

    # without the backend enabled, the database answers after the environment
    install_resolver(WorkerSecrets(factory, Settings(fernet_key=(KEY,))))
    assert Connection.get("both").host == "db-host"
    with pytest.raises(ConnectionNotFound):
        Connection.get("backend_only")


def test_a_backend_that_is_not_installed_is_one_line(
    factory: sessionmaker[Session], backend_name: str, resolver_installed: None
) -> None:
    settings = Settings(fernet_key=(KEY,), secrets_backends=("vualt",))
    install_resolver(WorkerSecrets(factory, settings))
    with pytest.raises(ConfigError, match=f"names 'vualt'.*installed: .*{backend_name}"):
        Connection.get("anything")
    listed = installed(Settings(secrets_backends=(backend_name, "vualt")))
    mine = [b for b in listed if b.name in (backend_name, "vualt")]
    assert [(b.name, b.enabled, b.target) for b in mine] == [
        (backend_name, True, f"{backend_name}_module:Backend"),
        ("vualt", True, ""),
    ]


def test_sluice_secrets_backends_lists_them(
    backend_name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLUICE_SECRETS_BACKENDS", backend_name)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["secrets", "backends"]) == 0
    out = capsys.readouterr().out
    assert backend_name in out and f"{backend_name}_module:Backend" in out
    assert f"read: the environment, then {backend_name}, then the database" in out


def test_what_a_try_reads_is_masked_in_its_log_and_error(
    factory: sessionmaker[Session],
    backend_name: str,
    monkeypatch: pytest.MonkeyPatch,
    resolver_installed: None,
) -> None:
    # Given a database connection, an environment one and a secret variable
    settings = Settings(fernet_key=(KEY,), secrets_backends=(backend_name,))
    db_password = 'pa ss@w/rd"\\x'
    box = box_of(settings)
    with transaction(factory) as session:
        conn = Connection(conn_type="postgresql", host="db", login="etl", password=db_password)
        add_connection(session, box, "warehouse", conn, utcnow())
        set_variable(session, box, "api_token", "tok-0123456789", is_secret=True, now=utcnow())
        set_variable(session, box, "region", "eu-west-1", is_secret=False, now=utcnow())
    monkeypatch.setenv("SLUICE_CONN_FROM_ENV", "http://u:env%2dpw%2Fsecret@h")
    install_resolver(WorkerSecrets(factory, settings))
    capture = TaskLogCapture(
        factory,
        ti_id=1,
        try_number=1,
        attempt_id="x",
        hostname="h",
        flush_interval=3600,
        mask=masker_for(settings),
    )
    # When the try reads them and prints them every way
    with capture:
        print("before any read: eu-west-1")
        db = Connection.get("warehouse")
        env = Connection.get("from_env")
        vault = Connection.get("backend_only")
        token = Variable.get("api_token")
        region = Variable.get("region")
        print("db", db.password, db.uri)
        print("env", env.password, env.uri)
        print("json", json.dumps({"p": db.password, "t": token}))
        print("repr", repr(db.password), [env.password])
        print("quoted", quote(db_password), quote(str(env.password), safe=""))
        print("backend", vault.password, Variable.get("backend_only"))
        print("plain", token, region)
    # Then none of them is in its log, and what is not secret is
    log = capture.buffer.snapshot()[0]
    for secret in (
        db_password,
        "env-pw/secret",
        "env%2dpw%2Fsecret",
        "tok-0123456789",
        "vault-pw-123",
        "backend-secret-value",
        json.dumps(db_password)[1:-1],
        quote(db_password, safe=""),
        quote(db_password),
        repr(db_password)[1:-1],
    ):
        assert secret not in log, (secret, log)
    assert log.count("***") >= 12
    assert "plain *** eu-west-1" in log and "before any read: eu-west-1" in log
    assert "db *** postgresql://etl:***@db" in log
    # and its error is masked as its log
    error = {"error": f"RuntimeError: login failed with {db_password} and tok-0123456789"}
    assert masked_error(settings, error, capture.mask) == {
        "error": "RuntimeError: login failed with *** and ***"
    }
    # and another try's masker is the deployment's only
    assert masker_for(settings)("tok-0123456789") == "tok-0123456789"
