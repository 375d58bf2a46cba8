"""The README's example of assets, watches and runs of other DAGs is a DAG file that
loads: its DAGs, schedules and outlets are what the text says."""

from __future__ import annotations

import re
from pathlib import Path

from sluice.tasks.loader import load_file
from sluice.tasks.serialize import serialize_dag

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_example_loads(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("## Runs that follow the world") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    (tmp_path / "world.py").write_text(block.group(1))
    dags = {d.dag_id: serialize_dag(d) for d in load_file(tmp_path / "world.py")}
    assert dags["ingest"]["tasks"]["load"]["outlets"] == ["s3://bucket/raw/"]
    assert dags["report"]["schedule"] == {
        "assets": {"all": [{"uri": "s3://bucket/raw/"}, {"uri": "s3://bucket/ref/"}]}
    }
    assert dags["per_genome"]["schedule"]["watch"]["interval"] == 30.0
    assert list(dags["per_genome"]["tasks"]) == ["start_report"]
