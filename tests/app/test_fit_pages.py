"""The fit parts of the Curves and Scaling laws pages through AppTest, on the seeded MLflow store
(tests/app/store_seed.py: exact curves, so every B* is known in closed form)."""

from __future__ import annotations

import json

import pytest

from tests.app.conftest import STUDY
from tests.app.store_seed import expected_cbs


def _open(at, page: str):
    at.run()
    at.switch_page(f"app_pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at


def test_scaling_page_sets_the_study_beside_the_paper(app_test, app_env):
    at = _open(app_test, "scaling")
    assert "Compared with the paper" in [s.value for s in at.subheader]
    table = [d.value for d in at.dataframe if "paper" in d.value.columns][0]
    assert list(table["paper"]) == [0.47, 0.087, 0.47]
    # The seeded settings share neither N nor D, nor a tokens-per-parameter ratio: no law is
    # defined, so the verdict is inconclusive and says why.
    (info,) = [i.value for i in at.info if "paper's finding" in i.value]
    assert info.startswith("This study is inconclusive on the paper's finding that B* scales with D, not with N")
    assert "no interval for the D-exponent at fixed N" in info


def test_curves_page_draws_censored_cells_as_lower_bounds_and_flags_b_ref_dominated_b_star(app_test, app_env):
    at = _open(app_test, "curves")
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    bounds = [t for t in fig["data"] if t.get("name", "").endswith("(censored)")]
    assert bounds and all(t["marker"]["symbol"] == "triangle-up-open" for t in bounds)
    assert any("a lower bound" in text for t in bounds for text in t["hovertext"])
    # B_ref = 128: B* = 1.2·128 + 0.2·64 = 166.4 for the first setting, within 10% of 153.6.
    at.select_slider(key=f"{STUDY}.b_ref").set_value(128).run()
    first = next(iter(app_env))
    assert expected_cbs(app_env[first], 128) == pytest.approx(166.4)
    captions = [c.value for c in at.caption if "B_ref is above B_noise here" in c.value]
    assert captions == [f"**{first}**: B_ref is above B_noise here; B* mostly reflects B_ref "
                        "(B* is within 10% of (1 + r)·B_ref = 154)."]
