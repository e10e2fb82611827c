"""Sharding: disjoint, complete, deterministic, balanced on PyTorch's real test times."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crcr.errors import InputError
from runners import sharding

ids_strategy = st.lists(st.text("abcdefgh_/", min_size=1, max_size=12).map(lambda s: f"test/{s}.py::T::t"),
                        min_size=0, max_size=60, unique=True)


@settings(max_examples=60, deadline=None)
@given(ids=ids_strategy, count=st.integers(1, 9), seed=st.randoms(use_true_random=False))
def test_shards_are_disjoint_complete_and_independent_of_input_order(ids, count, seed):
    weights = {i: float(len(i) % 7) + 0.5 for i in ids}
    shards = sharding.assign(weights, count)
    flat = [i for shard in shards for i in shard]
    assert sorted(flat) == sorted(ids)  # complete, and nothing twice
    assert len(flat) == len(set(flat))
    shuffled = list(weights.items())
    seed.shuffle(shuffled)
    assert sharding.assign(dict(shuffled), count) == shards  # every machine computes the same


def test_shard_of_keeps_the_run_order_and_the_union_is_everything():
    ids = [f"test/test_a.py::T::t{i}" for i in range(10)]
    weights = sharding.weights(ids)
    parts = [sharding.shard_of(ids, i, 3, weights) for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(ids)
    for part in parts:
        assert part == [i for i in ids if i in part]


def test_longest_first_beats_round_robin_on_skewed_durations():
    weights = {"a": 7.0, "b": 5.0, "c": 4.0, "d": 3.0, "e": 1.0}  # round robin: 12 and 8
    loads = sorted(sum(weights[i] for i in s) for s in sharding.assign(weights, 2))
    assert loads == [10.0, 10.0]


def test_weights_prefer_previous_results_then_file_times_then_counts():
    ids = ["test/test_ops.py::A::x", "test/test_ops.py::A::y", "test/test_nn.py::B::z"]
    by_file = sharding.weights(ids, None, {"test_ops": 10.0, "test_nn": 3.0})
    assert by_file == {ids[0]: 5.0, ids[1]: 5.0, ids[2]: 3.0}
    measured = sharding.weights(ids, {ids[0]: 2.0, ids[2]: 4.0}, {"test_ops": 10.0})
    assert measured[ids[0]] == 2.0 and measured[ids[2]] == 4.0 and measured[ids[1]] == 3.0  # mean of known
    assert set(sharding.weights(ids).values()) == {1.0}


@pytest.mark.parametrize("count", [4, 8, 16, 64])
def test_balance_on_real_pytorch_test_times(count):
    times = sharding.load_file_times()
    assert len(times) > 1000  # the real file, not a stub
    weights = {f"test/{name}.py": seconds for name, seconds in times.items()}
    ideal = sum(weights.values()) / count
    largest = max(sum(weights[i] for i in s) for s in sharding.assign(weights, count))
    # within 10% of ideal, unless a single file is longer than the ideal shard
    assert largest <= max(1.10 * ideal, max(weights.values()) + 1e-6)


@pytest.mark.parametrize("spec", ["3/2", "0/4", "a/b", "1/0", "2", "-1/3"])
def test_bad_shard_specs_are_input_errors(spec):
    with pytest.raises(InputError):
        sharding.parse_shard(spec)


def test_matrix_lists_every_shard():
    assert [m["shard"] for m in sharding.matrix(3)["include"]] == ["1/3", "2/3", "3/3"]


def test_previous_results_give_per_test_durations(tmp_path):
    from crcr.contracts.results import RunMeta, RunResults, TestResult

    old = RunResults(run=RunMeta(run_id="a", device="snpu"), tests=[
        TestResult(id="test/test_ops.py::A::slow", outcome="passed", duration_s=9.0),
        TestResult(id="test/test_ops.py::A::fast", outcome="failed", duration_s=1.0),
        TestResult(id="test/test_ops.py::A::skipped", outcome="skipped", duration_s=0.0),
    ])
    old.write(tmp_path / "old.json")
    durations = sharding.load_test_durations([tmp_path / "old.json"])
    assert durations == {"test/test_ops.py::A::slow": 9.0, "test/test_ops.py::A::fast": 1.0}
    ids = ["test/test_ops.py::A::slow", "test/test_ops.py::A::fast", "test/test_ops.py::A::new"]
    shards = sharding.assign(sharding.weights(ids, durations), 2)
    assert ["test/test_ops.py::A::slow"] in shards  # the slow test gets a shard of its own
