"""A run's conf values under secret-looking keys are masked in the logs and errors of
the tries that read them (issue 45, item 2), on the embedded default."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.integration.test_cancel_run import rows
from tests.procs import printed_states, standalone

DAG = """
from sluice import DAG, task

with DAG("conf_secrets", schedule=None):
    @task
    def prints(context):
        conf = context["conf"]
        print("conf:", conf)
        print("quoted:", conf["nested"]["db_password"].replace(" ", "%20"))
        return "done"

    @task
    def raises(context):
        raise RuntimeError("failed with token " + context["conf"]["API_TOKEN"])
"""

CONF = {
    "API_TOKEN": "tok-4f9a81c2",
    "nested": {"db_password": "pass word 7731", "host": "db.example"},
    "keys": ["first-key-0a1b", "second-key-2c3d"],
    "customer": "acme-corp",
}
SECRETS = ["tok-4f9a81c2", "pass word 7731", "pass%20word%207731", "first-key-0a1b"]


def test_secret_conf_values_are_masked_in_logs_and_errors(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "conf_secrets.py").write_text(textwrap.dedent(DAG))
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    done = standalone(
        tmp_path, dags, url, "--trigger", "conf_secrets", "--conf", json.dumps(CONF), "--json"
    )
    states = printed_states(done.stdout)
    assert states["prints"]["state"] == "success" and states["raises"]["state"] == "failed"
    logs = "\n".join(str(c) for (c,) in rows(url, "SELECT content FROM task_log"))
    errors = "\n".join(str(e) for (e,) in rows(url, "SELECT error FROM task_instance"))
    assert "acme-corp" in logs and "db.example" in logs  # other values are shown
    assert "***" in logs and "failed with token ***" in errors, (logs, errors)
    for secret in SECRETS:
        assert secret not in logs and secret not in errors, secret
        assert secret not in done.stdout and secret not in done.stderr, secret
