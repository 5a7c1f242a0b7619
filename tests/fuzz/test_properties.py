"""Property tests of two pure-ish cores: the job spec validator, fed arbitrary
JSON-like documents and mutations of known-good specs, and the job state
machine, driven through the real status setter on a real database.

The validator must either accept a document or raise a ValidationError whose
every error names a field, and an accepted spec must survive its stored form
(strict JSON, as PostgreSQL's JSONB holds it) unchanged. The status setter
must refuse a transition the table does not allow without writing anything,
write exactly one event for one it allows, and never let a job leave a
terminal status; every status must be reachable from QUEUED.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import (
    FINETUNE_SPEC,
    TRAIN_SPEC,
    count_rows,
    job_events,
    job_row,
    make_job,
    small_spec,
)
from trainplane.api.problems import validation_problem
from trainplane.db.models import Job
from trainplane.errors import InvalidTransitionError
from trainplane.jobs.spec import SPEC_KINDS, FinetuneSpec, TrainSpec, parse_spec
from trainplane.jobs.states import ALLOWED_TRANSITIONS, TERMINAL_STATUSES, JobStatus, is_allowed
from trainplane.services.status import set_status

SPEC_MODELS = {"train": TrainSpec, "finetune": FinetuneSpec}
GOOD_SPECS = (small_spec(), TRAIN_SPEC, FINETUNE_SPEC)
# The errors about the tag itself: pydantic puts them at the root, and the
# API reports them under `kind`.
# jobs.max_runtime_seconds, gpus and gpus_per_node are 32-bit INTEGER columns.
MAX_INT32 = 2**31 - 1
TAG_ERRORS = frozenset({"union_tag_not_found", "union_tag_invalid"})
PROPERTY_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# --- the spec validator ---------------------------------------------------------------

# Numbers at the edges of what fields, columns and JSON hold, drawn often.
EDGE_NUMBERS = (0, -1, 2**31, 2**63, 10**30, math.inf, -math.inf, math.nan)
edge_numbers = st.sampled_from(EDGE_NUMBERS)
# What a JSON parser (Python's accepts NaN and Infinity) can hand the validator.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | edge_numbers
    | st.text(max_size=20)
    | st.sampled_from(["", " ", "train", "finetune", "lora", "24h", "s3://b", "/ckpt", "x:y"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(sorted({*TrainSpec.model_fields, *FinetuneSpec.model_fields}))
mappings = st.dictionaries(field_names | st.text(max_size=8), json_values, max_size=8)
# Mostly with a good tag, so that validation gets past it to the fields.
spec_like = (
    mappings
    | mappings.map(lambda document: {**document, "kind": "train"})
    | mappings.map(lambda document: {**document, "kind": "finetune"})
)


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``document`` a mutation can hit, the root included."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


def _node(document: Any, path: list[Any]) -> Any:
    for part in path:
        document = document[part]
    return document


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A known-good spec with one to three places replaced, removed, or given
    an extra key."""
    document = copy.deepcopy(draw(st.sampled_from(GOOD_SPECS)))
    for _ in range(draw(st.integers(1, 3))):
        *parents, last = draw(st.sampled_from(_paths(document)[1:]))
        node = _node(document, parents)
        action = draw(st.sampled_from(["replace", "remove", "extra"]))
        if action == "replace":
            node[last] = draw(edge_numbers | json_values)
        elif action == "remove":
            del node[last]
        elif isinstance(node[last], dict):
            node[last][draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    return document


def _api_field(detail: dict[str, Any]) -> str:
    """The field a 422 names for this error, as the API writes it."""
    return json.loads(validation_problem([detail]).body)["errors"][0]["field"]


def _assert_names_fields(document: dict[str, Any], error: ValidationError) -> None:
    for detail in error.errors():
        if detail["type"] in TAG_ERRORS:
            assert detail["loc"] == ()
            assert document.get("kind") not in SPEC_KINDS, detail
            assert _api_field(detail) == "kind"
            continue
        tag, *path = detail["loc"]
        # Past the tag, a non-empty path of keys and list indices...
        assert tag in SPEC_KINDS and path, detail
        assert all(isinstance(part, str | int) for part in path), detail
        # ...whose first key is one the document has or the spec defines.
        assert path[0] in document or path[0] in SPEC_MODELS[tag].model_fields, detail


def _assert_storable(spec: TrainSpec | FinetuneSpec) -> None:
    """What the jobs row keeps of ``spec`` fits its columns, and the spec
    itself round-trips through its stored form."""
    seconds = (spec.max_runtime_seconds, spec.stuck_after_seconds)
    counts = (spec.resources.gpus, spec.resources.gpus_per_node)
    assert all(n is None or 0 < n <= MAX_INT32 for n in (*seconds, *counts)), (seconds, counts)
    assert parse_spec(spec.model_dump()) == spec
    stored = spec.model_dump(mode="json")
    # allow_nan=False: JSONB, like any strict JSON, has no NaN or Infinity.
    text = json.dumps(stored, allow_nan=False)
    again = parse_spec(json.loads(text))
    assert again == spec
    assert again.model_dump(mode="json") == stored


def _check(document: dict[str, Any]) -> None:
    try:
        spec = parse_spec(document)
    except ValidationError as error:
        _assert_names_fields(document, error)
    else:
        _assert_storable(spec)


@PROPERTY_SETTINGS
@given(spec_like)
def test_any_mapping_validates_or_names_the_fields_at_fault(document: dict[str, Any]) -> None:
    _check(document)


@PROPERTY_SETTINGS
@given(mutated_specs())
def test_a_mutated_spec_validates_or_names_the_fields_at_fault(document: dict[str, Any]) -> None:
    _check(document)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(json_values.filter(lambda value: not isinstance(value, dict)))
def test_a_document_that_is_no_mapping_is_one_error_about_the_body(document: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_spec(document)
    (detail,) = raised.value.errors()
    assert detail["loc"] == () and _api_field(detail) == "body"


def _replaced(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    *parents, last = path
    _node(changed, parents)[last] = value
    return changed


def test_an_edge_number_anywhere_in_a_good_spec_validates_or_names_the_field() -> None:
    # Exhaustive where the mutations above are a sample: every place of
    # every known-good spec, each edge number.
    for document in GOOD_SPECS:
        for path in _paths(document)[1:]:
            for number in EDGE_NUMBERS:
                _check(_replaced(document, path, number))


def test_the_known_good_specs_are_storable() -> None:
    # The mutation test starts from these: they must be good to begin with.
    for document in GOOD_SPECS:
        _assert_storable(parse_spec(document))


# --- the state machine ----------------------------------------------------------------

ALL_STATUSES = tuple(JobStatus)
LIVE_STATUSES = tuple(status for status in JobStatus if status not in TERMINAL_STATUSES)
visited: set[JobStatus] = set()  # statuses the machines below were in, across runs


class StatusSetterMachine(RuleBasedStateMachine):
    """One job, moved by the real set_status; the model is its status."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        super().__init__()
        self.session = sessions()
        self.absorbing_checked = False

    # A job enters in QUEUED; starting some runs elsewhere (the row put there
    # directly) spends their steps on the transitions out of every status.
    # Terminal ones need no head start: most runs end in one.
    @initialize(status=st.sampled_from(LIVE_STATUSES))
    def a_job(self, status: JobStatus) -> None:
        self.job_id = make_job(self.session, status=status).id
        self.status = status
        self.events = 0
        visited.add(status)

    def teardown(self) -> None:
        self.session.close()

    def _try(self, target: JobStatus) -> bool:
        """set_status to ``target``, committing whatever it wrote even when it
        refuses: a refusal must write nothing, not rely on a rollback."""
        self.session.expunge_all()
        with self.session.begin():
            job = self.session.get_one(Job, self.job_id)
            try:
                set_status(self.session, job, target, reason=f"to {target}", actor="hypothesis")
            except InvalidTransitionError:
                return False
        return True

    def _move(self, target: JobStatus) -> None:
        before = job_row(self.session, self.job_id)
        snapshot = (before.status, before.reason, before.updated_at, before.finished_at)
        rows = count_rows(self.session)
        moved = self._try(target)
        after = job_row(self.session, self.job_id)
        events = job_events(self.session, self.job_id)
        if not is_allowed(self.status, target):
            assert not moved
            assert (after.status, after.reason, after.updated_at, after.finished_at) == snapshot
            assert count_rows(self.session) == rows and len(events) == self.events
            return
        assert moved and after.status == target
        jobs, all_events = rows
        assert count_rows(self.session) == (jobs, all_events + 1)
        assert len(events) == self.events + 1
        assert events[-1] == (self.status.value, target.value, f"to {target}")
        assert (after.finished_at is not None) == (target in TERMINAL_STATUSES)
        self.status, self.events = target, self.events + 1
        visited.add(target)

    @rule(status=st.sampled_from(ALL_STATUSES))
    def any_transition(self, status: JobStatus) -> None:
        self._move(status)

    @precondition(lambda self: self.status not in TERMINAL_STATUSES)
    @rule(data=st.data())
    def an_allowed_transition(self, data: st.DataObject) -> None:
        # Walks the table so that runs get past QUEUED and reach every status.
        self._move(data.draw(st.sampled_from(sorted(ALLOWED_TRANSITIONS[self.status]))))

    @precondition(lambda self: self.status in TERMINAL_STATUSES and not self.absorbing_checked)
    @rule()
    def a_terminal_status_is_absorbing(self) -> None:
        for target in ALL_STATUSES:
            self._move(target)
        assert self.status in TERMINAL_STATUSES
        self.absorbing_checked = True

    @invariant()
    def the_row_agrees_with_the_model(self) -> None:
        assert job_row(self.session, self.job_id).status == self.status


def test_the_status_setter_follows_the_transition_table(sessions: sessionmaker[Session]) -> None:
    visited.clear()
    run_state_machine_as_test(
        lambda: StatusSetterMachine(sessions),
        settings=settings(
            max_examples=40,
            stateful_step_count=12,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    assert visited == set(ALL_STATUSES), "the runs reached every status"


def _path_from_queued(goal: JobStatus) -> list[JobStatus]:
    """A shortest list of statuses from QUEUED to ``goal`` in the table."""
    came_from: dict[JobStatus, JobStatus | None] = {JobStatus.QUEUED: None}
    queue = deque([JobStatus.QUEUED])
    while queue:
        current = queue.popleft()
        for nxt in sorted(ALLOWED_TRANSITIONS[current]):
            if nxt not in came_from:
                came_from[nxt] = current
                queue.append(nxt)
    assert goal in came_from, f"{goal} cannot be reached from QUEUED"
    path = [goal]
    while (previous := came_from[path[-1]]) is not None:
        path.append(previous)
    return path[::-1]


@pytest.mark.parametrize("goal", ALL_STATUSES)
def test_every_status_is_reachable_from_queued(session: Session, goal: JobStatus) -> None:
    job_id = make_job(session).id
    path = _path_from_queued(goal)
    for current, target in itertools.pairwise(path):
        session.expunge_all()
        with session.begin():
            job = session.get_one(Job, job_id)
            assert job.status == current
            set_status(session, job, target, reason="walk")
    assert job_row(session, job_id).status == goal
    assert len(job_events(session, job_id)) == len(path) - 1


def test_terminal_statuses_have_no_way_out() -> None:
    assert all(not ALLOWED_TRANSITIONS[status] for status in TERMINAL_STATUSES)
    assert set(ALLOWED_TRANSITIONS) == set(ALL_STATUSES)
