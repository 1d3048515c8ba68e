"""The seeded-bug corpus: every finding code is caught in a small plain-PyTorch script that has
the bug, and clean scripts produce no warning- or error-level findings."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from treeqa.health import CODES, run_doctor

SCRIPTS = Path(__file__).parent / "scripts"

EXPECTED = {
    "bug_graph_retained.py": "graph-retained",
    "bug_loss_accumulated.py": "loss-accumulated-with-graph",
    "bug_retain_graph.py": "retain-graph-every-step",
    "bug_parameter_alias.py": "parameter-alias",
    "bug_unused_parameter.py": "unused-parameter",
    "bug_probs_into_ce.py": "probabilities-into-cross-entropy",
    "bug_activation_growth.py": "activation-growth",
    "bug_loss_at_init.py": "loss-at-init",
    "bug_non_finite.py": "non-finite",
    "bug_step_time_regression.py": "step-time-regression",
    "bug_memory_growth.py": "memory-growth",
    "bug_input_bound.py": "input-bound",
    "bug_hot_op.py": "hot-op",
}
# Scripts whose bug needs many steps to show; opt in with -m slow.
SLOW = {"bug_step_time_regression.py", "bug_memory_growth.py", "bug_hot_op.py"}
CLEAN = ["clean_mlp.py", "clean_gru.py", "clean_transformer.py"]


def doctor(name: str) -> tuple[int, dict]:
    return run_doctor(["python", str(SCRIPTS / name)], every=10, stream=io.StringIO())


def test_every_code_has_a_bug_script() -> None:
    assert set(EXPECTED.values()) == set(CODES)
    assert all((SCRIPTS / name).exists() for name in [*EXPECTED, *CLEAN])


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in EXPECTED]
)
def test_bug_script_is_named(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor(name)
    assert code == 0
    found = {
        f["code"]: f for f in report["findings"] if f["severity"] != "info" or f["code"] == "hot-op"
    }
    assert EXPECTED[name] in found, report["findings"]
    finding = found[EXPECTED[name]]
    assert finding["fix"] and finding["evidence"]
    if name != "bug_hot_op.py":
        assert finding["severity"] in ("warning", "error")


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "clean_transformer.py" else n for n in CLEAN],
)
def test_clean_script_has_no_warnings(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor(name)
    assert code == 0
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
