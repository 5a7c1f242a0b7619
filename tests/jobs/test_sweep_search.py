"""The sweep search engine: Optuna's samplers and pruners over a study rebuilt
from trial records at every call."""

from __future__ import annotations

import math
from typing import Any

from trainplane.jobs.spec import parse_spec
from trainplane.jobs.sweep_search import (
    TrialRecord,
    best,
    counts,
    decision_steps,
    judge,
    propose,
)
from trainplane.jobs.sweep_spec import SweepSpec

LR = "entrypoint.args.lr"


def sweep(parameters: dict[str, Any], **sections: Any) -> SweepSpec:
    document = {
        "kind": "sweep",
        "name": "search",
        "trial": {
            "kind": "train",
            "entrypoint": {
                "function": "train:train_loop",
                "args": {"lr": 0.01, "batch": 16, "layers": 2},
                "working_dir": ".",
            },
        },
        "parameters": parameters,
        "objective": {"metric": "loss", "mode": "min"},
        **sections,
    }
    spec = parse_spec(document)
    assert isinstance(spec, SweepSpec)
    return spec


def record(number: int, state: str = "running", value: float | None = None, **fields: Any):
    return TrialRecord(
        number=number,
        parameters=fields.get("parameters", {LR: 0.01}),
        state=state,  # type: ignore[arg-type]
        value=value,
        intermediate=fields.get("intermediate", {}),
        search_state=fields.get("search_state", {}),
    )


MIXED = {
    LR: {"distribution": "log_uniform", "low": 1e-5, "high": 0.3},
    "entrypoint.args.batch": {"values": [16, 32, 64]},
    "entrypoint.args.layers": {"distribution": "int_uniform", "low": 1, "high": 6},
}


def run_search(spec: SweepSpec, trials: int) -> list[dict[str, Any]]:
    """Proposals 1..trials, each trial recorded as succeeded with a made-up
    loss before the next is proposed."""
    records: list[TrialRecord] = []
    for number in range(1, trials + 1):
        parameters = propose(spec, records, number)
        assert parameters is not None
        loss = abs(math.log10(parameters[LR]) + 2)
        records.append(record(number, "succeeded", loss, parameters=parameters))
    return [r.parameters for r in records]


def test_random_search_is_reproducible_by_seed_and_draws_anew_per_trial():
    spec = sweep(MIXED, search={"algorithm": "random", "trials": 8, "seed": 7})
    first = run_search(spec, 8)
    assert run_search(spec, 8) == first  # the same seed and results: the same proposals
    assert len({p[LR] for p in first}) == 8
    for parameters in first:
        assert set(parameters) == set(MIXED)
        assert 1e-5 <= parameters[LR] <= 0.3 and isinstance(parameters[LR], float)
        assert parameters["entrypoint.args.batch"] in (16, 32, 64)
        assert type(parameters["entrypoint.args.layers"]) is int
        assert 1 <= parameters["entrypoint.args.layers"] <= 6
    other_seed = sweep(MIXED, search={"algorithm": "random", "trials": 8, "seed": 8})
    assert run_search(other_seed, 8) != first
    # Asked again for a trial it already proposed, it answers the same.
    records = [record(1, parameters=first[0])]
    assert propose(spec, records, 1) == first[0]


def test_tpe_is_reproducible_and_proposes_near_the_best_results():
    spec = sweep({LR: MIXED[LR]}, search={"algorithm": "tpe", "trials": 40, "parallel": 2})
    random = sweep({LR: MIXED[LR]}, search={"algorithm": "random", "trials": 40})
    history = [
        record(n, "succeeded", abs(math.log10(p[LR]) + 2), parameters=p)
        for n, p in enumerate(run_search(random, 12), 1)
    ]
    history.append(record(13, "running", parameters={LR: 0.2}))
    numbers = range(14, 30)
    proposals = [propose(spec, history, n) for n in numbers]
    assert [propose(spec, history, n) for n in numbers] == proposals
    blind = [propose(random, history, n) for n in numbers]

    def distance(points: list[dict[str, Any] | None]) -> float:
        return sorted(abs(math.log10(p[LR]) + 2) for p in points if p)[len(points) // 2]

    # The losses say 1e-2 is best: TPE's proposals cluster there, random ones do not.
    assert distance(proposals) < 0.5 * distance(blind)


def test_grid_proposes_every_combination_once_then_nothing():
    spec = sweep(
        {"entrypoint.args.batch": {"values": [16, 32]}, LR: {"values": [0.1, 0.01, 0.001]}},
        search={"algorithm": "grid"},
    )
    records: list[TrialRecord] = []
    for number in range(1, 7):
        parameters = propose(spec, records, number)
        assert parameters is not None
        records.append(record(number, "succeeded", 1.0, parameters=parameters))
    combos = {(p["entrypoint.args.batch"], p[LR]) for p in (r.parameters for r in records)}
    assert combos == {(b, lr) for b in (16, 32) for lr in (0.1, 0.01, 0.001)}
    assert propose(spec, records, 7) is None


def test_decision_steps_per_algorithm():
    asha = sweep({LR: MIXED[LR]}, early_stop={"algorithm": "asha", "min_steps": 10})
    assert decision_steps(asha)[:4] == [10, 30, 90, 270]
    assert all(step < 2**31 for step in decision_steps(asha))
    median = sweep({LR: MIXED[LR]}, early_stop={"algorithm": "median", "min_steps": 5})
    assert decision_steps(median)[:3] == [5, 10, 15] and len(decision_steps(median)) == 64
    assert decision_steps(sweep({LR: MIXED[LR]})) == []


def judged(spec: SweepSpec, records: list[TrialRecord], number: int, step: int, value: float):
    """Judge trial ``number`` and store the verdict in ``records`` as the
    database would: the value at the step, the search state, pruned or not."""
    verdict = judge(spec, records, number, step, value)
    own = next(r for r in records if r.number == number)
    records[records.index(own)] = record(
        number,
        "pruned" if verdict.prune else "running",
        parameters=own.parameters,
        intermediate={**own.intermediate, step: value},
        search_state=verdict.search_state,
    )
    return verdict


def test_asha_prunes_all_but_the_best_at_each_rung_from_stored_state():
    spec = sweep(
        {LR: MIXED[LR]},
        early_stop={"algorithm": "asha", "min_steps": 10, "reduction_factor": 2},
    )
    records = [record(n) for n in (1, 2, 3, 4)]
    assert not judged(spec, records, 1, 10, 1.0).prune  # alone at its rung: kept
    second = judge(spec, records, 2, 10, 2.0)
    # Without the first trial's stored rung value, the second has no competitor.
    forgetful = [record(1), record(2)]
    assert not judge(spec, forgetful, 2, 10, 2.0).prune
    assert second == judged(spec, records, 2, 10, 2.0)
    assert second.prune
    assert second.reason == (
        "pruned at rung 0 (step 10): loss 2 is not in the best 1/2 of 2 trials there (cutoff 1)"
    )
    assert not judged(spec, records, 3, 10, 0.5).prune
    fourth = judged(spec, records, 4, 10, 1.5)
    assert fourth.prune and fourth.reason == (
        "pruned at rung 0 (step 10): loss 1.5 is not in the best 1/2 of 4 trials there (cutoff 1)"
    )
    # Rung 1: the first to reach it is kept, the worse of the two is pruned.
    assert not judged(spec, records, 1, 20, 0.9).prune
    third = judged(spec, records, 3, 20, 1.25)
    assert third.prune and third.reason.startswith("pruned at rung 1 (step 20): loss 1.25 ")
    assert "of 2 trials there (cutoff 0.9)" in third.reason
    assert records[2].search_state == {"completed_rung_0": 0.5, "completed_rung_1": 1.25}
    assert counts(records) == {"running": 1, "succeeded": 0, "pruned": 3, "failed": 0}


def test_asha_for_max_keeps_the_highest_and_prunes_nan():
    spec = sweep(
        {LR: MIXED[LR]},
        objective={"metric": "accuracy", "mode": "max"},
        early_stop={"algorithm": "asha", "min_steps": 10, "reduction_factor": 2},
    )
    records = [record(1), record(2), record(3)]
    assert not judged(spec, records, 1, 10, 0.6).prune
    assert not judged(spec, records, 2, 10, 0.8).prune  # higher is better
    low = judged(spec, records, 3, 10, 0.5)
    assert low.prune and "accuracy 0.5" in low.reason and "(cutoff 0.8)" in low.reason
    nan = judge(spec, [record(4)], 4, 10, float("nan"))
    assert nan.prune and nan.reason == "pruned at step 10: accuracy is NaN"


def test_median_prunes_a_trial_worse_than_the_finished_trials_median():
    spec = sweep({LR: MIXED[LR]}, early_stop={"algorithm": "median", "min_steps": 10})
    finished = [
        record(1, "succeeded", 0.5, intermediate={10: 1.0, 20: 0.8}),
        record(2, "succeeded", 0.4, intermediate={10: 1.2, 20: 0.6}),
        record(3, "pruned", intermediate={10: 9.0}),  # pruned trials are not in the median
    ]
    # One finished trial is not enough to prune by.
    assert not judge(spec, [finished[0], record(4)], 4, 10, 5.0).prune
    assert not judge(spec, [*finished, record(4)], 4, 10, 1.05).prune
    verdict = judge(spec, [*finished, record(4)], 4, 10, 1.5)
    assert verdict.prune
    assert verdict.reason == (
        "pruned at step 10: loss 1.5 (its best so far) is worse than the median 1.1 "
        "of 2 finished trials there"
    )
    # The best value so far counts: a trial that was good at step 10 is kept at 20.
    earlier = record(4, intermediate={10: 0.5})
    assert not judge(spec, [*finished, earlier], 4, 20, 0.75).prune


def test_no_early_stop_keeps_every_trial():
    spec = sweep({LR: MIXED[LR]})
    verdict = judge(spec, [record(1, search_state={"kept": 1})], 1, 10, 99.0)
    assert not verdict.prune and verdict.search_state == {"kept": 1}


def test_best_is_the_succeeded_trial_with_the_best_value_for_min_and_max():
    records = [
        record(1, "succeeded", 0.7),
        record(2, "pruned", intermediate={10: 0.1}),
        record(3, "succeeded", 0.3),
        record(4, "succeeded", None),  # succeeded without reporting the objective
        record(5, "failed"),
        record(6, "succeeded", 0.3),
        record(7, "running"),
        record(8, "succeeded", 0.9),
    ]
    spec = sweep({LR: MIXED[LR]})
    assert best(spec, records) == records[2]  # a tie goes to the earlier trial
    maximise = sweep({LR: MIXED[LR]}, objective={"metric": "accuracy", "mode": "max"})
    assert best(maximise, records) == records[7]
    assert best(spec, records[3:5]) is None
    assert counts(records) == {"running": 1, "succeeded": 5, "pruned": 1, "failed": 1}
    assert counts([]) == {"running": 0, "succeeded": 0, "pruned": 0, "failed": 0}


def test_stored_parameters_outside_the_space_are_left_out_of_the_study():
    spec = sweep(MIXED, search={"algorithm": "tpe", "trials": 6})
    odd = [
        record(1, "succeeded", 0.5, parameters={LR: 5.0, "entrypoint.args.batch": 48}),
        record(2, "succeeded", 0.4, parameters={"entrypoint.args.layers": 3, "gone": 1}),
        record(3, "failed", parameters={}),
    ]
    parameters = propose(spec, odd, 4)
    assert parameters is not None and set(parameters) == set(MIXED)
    assert propose(spec, odd, 4) == parameters
