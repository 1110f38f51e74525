"""train.cpu_threads: the trainer's CPU thread count, chosen in one place and kept in the run's files."""

from __future__ import annotations

import json

import pytest

from hornn_dist.config import load_config
from hornn_dist.util.errors import ConfigError
from tests.train_helpers import check_ok, prepared_tiny, run_here, train_into


def _hardware(out) -> str:
    state = sorted((out / "checkpoints").glob("step_*/trainer_state.json"))[-1]
    return json.loads(state.read_text())["hardware"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return prepared_tiny(tmp_path_factory.mktemp("threads"))


@pytest.mark.parametrize(("omp", "expected"), [("", "(1 thread)"), ("2", "(2 threads)")])
def test_auto_follows_omp_num_threads_else_one(tiny, omp, expected):
    """ "auto": OMP_NUM_THREADS where a launcher or sweep set it, else 1; the state says which."""
    out = tiny / f"auto{omp}"
    proc = run_here(
        "hornn_dist.train",
        str(tiny / "config.toml"),
        "--set", f"train.output_dir={out}",
        "--set", "train.max_steps=2",
        extra_env={"OMP_NUM_THREADS": omp},
    )  # fmt: skip
    check_ok(proc)
    assert _hardware(out).endswith(expected)


def test_a_number_sets_exactly_that_many(tiny):
    out = tiny / "two"
    check_ok(train_into(tiny, out, "--set", "train.max_steps=2", "--set", "train.cpu_threads=2"))
    assert _hardware(out).endswith("(2 threads)")


@pytest.mark.parametrize("value", ["0", '"many"', "5000"])
def test_bad_values_are_one_line(tmp_path, value):
    path = tmp_path / "c.toml"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"train\.cpu_threads must"):
        load_config(str(path), [f"train.cpu_threads={value}"])
