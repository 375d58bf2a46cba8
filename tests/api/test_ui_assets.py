"""The UI's static assets: no CDN, every state coloured accessibly and labelled in text."""

from __future__ import annotations

import re

import pytest

from sluice.scheduler.api.ui import STATIC_DIR
from sluice.scheduler.core.states import DagRunState, TaskInstanceState

CSS = (STATIC_DIR / "style.css").read_text()
COMMON_JS = (STATIC_DIR / "common.js").read_text()


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    light, dark = sorted([_luminance(a), _luminance(b)], reverse=True)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("state", sorted({*TaskInstanceState, *DagRunState}))
def test_every_state_has_aa_contrast_and_a_text_label(state: str) -> None:
    rule = re.search(
        rf"\.cell\.state-{state} \{{ background: (#[0-9a-f]{{6}}); color: (#[0-9a-f]{{6}});", CSS
    )
    assert rule, f"no colours for state {state}"
    assert contrast(rule.group(1), rule.group(2)) >= 4.5
    label = re.search(rf'^\s+{state}: \["([^"]+)", "([^"]+)"\],$', COMMON_JS, re.M)
    assert label, f"no text label for state {state}"


def test_assets_load_nothing_from_other_hosts() -> None:
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), path.name
        assert "@import" not in text and "url(http" not in text, path.name


def test_pages_refuse_foreign_scripts(client) -> None:
    for path in ("/", "/dags/demo", "/dags/demo/versions/0123abcd"):
        response = client.get(path)
        assert response.status_code == 200 and "<!doctype html>" in response.text
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy
    assert client.get("/static/dag.js").headers["content-type"].startswith("text/javascript")
