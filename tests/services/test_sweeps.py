"""Sweeps in the database, on every backend: submitting one (its row, its
event, its names, its refusals named as the sweep spells them, replays by
Idempotency-Key), inserting trials, reading them back as the search's
records, cancelling a sweep with its trials in one transaction, and
placement passing over sweep rows."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from tests.factories import (
    EXAMPLES,
    job_attempts,
    job_events,
    job_row,
    make_attempt,
    make_cluster,
)
from trainplane.db.access_models import OwnedName
from trainplane.db.base import utcnow
from trainplane.db.engine import read_only
from trainplane.db.models import Job, JobAttempt, Project, SweepTrial
from trainplane.errors import InvalidInputError
from trainplane.jobs.spec import load_sweep_spec, parse_spec
from trainplane.jobs.states import JobStatus
from trainplane.services import queue
from trainplane.services.access import Caller
from trainplane.services.file_access import FileAccess
from trainplane.services.jobs import cancel_job, insert_trial_job, submit_job
from trainplane.services.placement import load_queue, place_queued_jobs
from trainplane.services.sweeps import trial_records

S = JobStatus


def sweep_document(name: str = "lr", **overrides) -> dict:
    """Two-GPU trials of examples/mlp, lr log-uniform, batch one of two sizes."""
    document = {
        "kind": "sweep",
        "name": name,
        "trial": {
            "kind": "train",
            "entrypoint": {
                "function": "train:train_loop",
                "working_dir": str(EXAMPLES / "mlp"),
                "args": {"steps": 30},
            },
            "resources": {"gpus": 2},
        },
        "parameters": {
            "entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1},
            "entrypoint.args.global_batch": {"values": [32, 64]},
        },
        "objective": {"metric": "loss"},
        "search": {"trials": 4, "parallel": 2},
        "register_model": {"name": "lr-best-model", "alias": "best"},
        "priority": "high",
    }
    document.update(overrides)
    return document


@pytest.fixture
def submit(session, settings):
    access = FileAccess.from_settings(settings)

    def submit(document: dict, key: str | None = None, caller: Caller | None = None):
        return submit_job(
            session,
            caller or Caller.local_admin(),
            parse_spec(document),
            access=access,
            idempotency_key=key,
        )

    return submit


def add_trial(session, sweep_id: str, number: int, **parameters) -> str:
    """Trial ``number`` as the controller inserts it."""
    session.expunge_all()
    with session.begin():
        sweep = session.get_one(Job, sweep_id)
        values = {"entrypoint.args.lr": 0.01, "entrypoint.args.global_batch": 32, **parameters}
        spec = load_sweep_spec(sweep.spec).trial_spec(values, number)
        trial = insert_trial_job(
            session,
            sweep,
            spec,
            number=number,
            parameters=values,
            decision_steps=[10, 30],
            now=utcnow(),
        )
        return trial.id


def set_trial(session, job_id: str, status: JobStatus, **columns) -> None:
    """A trial's job status and sweep columns, set directly."""
    with session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(status=status.value))
        if columns:
            session.execute(update(SweepTrial).where(SweepTrial.job_id == job_id).values(**columns))


def test_a_submitted_sweep_is_one_queued_row_that_claims_its_names(session, submit):
    submission = submit(sweep_document(), key="k-1")
    assert submission.created
    sweep = job_row(session, submission.job.id)
    assert (sweep.kind, sweep.status, sweep.strategy, sweep.gpus) == ("sweep", "QUEUED", "sweep", 2)
    assert (sweep.parent_id, sweep.name, sweep.priority) == (None, "lr", 100)
    assert sweep.folder.endswith(f"/default/{sweep.id}")
    assert sweep.spec["search"]["trials"] == 4
    assert job_events(session, sweep.id) == [(None, "QUEUED", "submitted by local")]
    with session.begin():
        owned = set(session.execute(select(OwnedName.kind, OwnedName.name)).all())
    assert owned >= {("model", "lr-best-model"), ("experiment", "default")}

    replayed = submit(sweep_document(), key="k-1")
    assert (replayed.created, replayed.job.id) == (False, sweep.id)
    with session.begin():
        assert session.scalar(select(Job.id).where(Job.kind == "sweep").offset(1)) is None


def test_the_widest_trial_decides_the_gpus_quota_and_clusters(session, submit):
    make_cluster(session, gpus=4)
    wide = sweep_document(
        parameters={"resources.gpus": {"values": [1, 8]}, "entrypoint.args.lr": {"values": [0.1]}}
    )
    with pytest.raises(InvalidInputError) as refused:
        submit(wide)
    assert refused.value.field == "parameters.resources.gpus"
    assert "8 GPUs" in refused.value.message

    with session.begin():
        session.execute(update(Project).where(Project.name == "default").values(max_gpus=2))
    fits = sweep_document(parameters={"resources.gpus": {"values": [1, 3]}})
    with pytest.raises(InvalidInputError) as over_quota:
        submit(fits)
    assert over_quota.value.field == "parameters.resources.gpus"
    assert "at most 2 GPUs" in over_quota.value.message
    assert job_row(session, submit(sweep_document()).job.id).gpus == 2


def test_a_place_no_trial_may_name_is_refused_by_its_field(session, submit, tmp_path):
    outside = str(tmp_path)  # not among the server's paths
    template = sweep_document()["trial"]
    template["entrypoint"]["working_dir"] = outside
    with pytest.raises(InvalidInputError) as refused:
        submit(sweep_document(trial=template))
    assert refused.value.field == "trial.entrypoint.working_dir"

    swept = sweep_document(
        parameters={"entrypoint.working_dir": {"values": [str(EXAMPLES / "mlp"), outside]}}
    )
    with pytest.raises(InvalidInputError) as refused:
        submit(swept)
    assert refused.value.field == "parameters.entrypoint.working_dir"
    with session.begin():
        assert session.scalar(select(Job.id)) is None


def test_a_trial_is_a_queued_job_of_its_sweep_with_its_trial_row(session, submit):
    sweep = submit(sweep_document()).job
    trial_id = add_trial(session, sweep.id, 3, **{"entrypoint.args.lr": 0.003})
    trial = job_row(session, trial_id)
    assert (trial.kind, trial.status, trial.name, trial.parent_id) == (
        "train",
        "QUEUED",
        "lr-3",
        sweep.id,
    )
    assert (trial.submitted_by, trial.gpus, trial.priority) == ("local", 2, 100)
    assert trial.folder == f"{sweep.folder}/{trial_id}"
    assert trial.spec["entrypoint"]["args"]["lr"] == 0.003
    assert trial.spec["register_model"]["name"] == "lr-best-model"
    assert job_events(session, trial_id) == [(None, "QUEUED", "trial 3 of sweep lr")]
    with session.begin():
        row = session.get_one(SweepTrial, trial_id)
        assert (row.sweep_id, row.number, row.decision_steps, row.values) == (
            sweep.id,
            3,
            [10, 30],
            {},
        )
        assert row.parameters["entrypoint.args.lr"] == 0.003
    with pytest.raises(IntegrityError):  # one trial per number
        add_trial(session, sweep.id, 3)


def test_trial_records_say_how_each_trial_stands(session, submit):
    sweep_id = submit(sweep_document()).job.id
    cases = [
        (S.SUCCEEDED, {"last_value": 0.5, "values": {"10": 0.9}}, "succeeded", 0.5),
        (S.SUCCEEDED, {}, "failed", None),  # never reported the objective
        (S.CANCELLED, {"pruned_reason": "pruned at rung 0", "last_value": 2.0}, "pruned", None),
        (S.CANCELLED, {}, "failed", None),  # cancelled by a user
        (S.FAILED, {"last_value": 1.0}, "failed", None),
        (S.RUNNING, {"last_value": 1.5, "values": {"10": 1.7}}, "running", None),
        (S.QUEUED, {}, "running", None),
        (S.RESTARTING, {}, "running", None),
    ]
    for number, (status, columns, _, _) in enumerate(cases, start=1):
        set_trial(session, add_trial(session, sweep_id, number), status, **columns)
    with read_only(session):
        records = trial_records(session, sweep_id)
    assert [(r.number, r.state, r.value) for r in records] == [
        (number, state, value) for number, (_, _, state, value) in enumerate(cases, start=1)
    ]
    assert records[0].intermediate == {10: 0.9}
    assert records[0].parameters["entrypoint.args.global_batch"] == 32
    assert records[0].search_state == {}


def test_cancelling_a_running_sweep_cancels_its_open_trials_at_once(session, submit):
    sweep_id = submit(sweep_document()).job.id
    queued, running, starting, done = (add_trial(session, sweep_id, n) for n in (1, 2, 3, 4))
    set_trial(session, running, S.RUNNING)
    set_trial(session, starting, S.STARTING)
    set_trial(session, done, S.SUCCEEDED, last_value=0.3)
    attempt = make_attempt(session, running)
    with session.begin():
        session.execute(update(Job).where(Job.id == sweep_id).values(status="RUNNING"))
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(lease_expires_at=utcnow(), lease_token=None)
        )

    detail = cancel_job(session, Caller.local_admin(), sweep_id)

    assert (detail.job.status, detail.job.reason) == (
        "CANCELLING",
        "cancel requested by local; cancelling its trials",
    )
    assert [job_row(session, t).status for t in (queued, running, starting, done)] == [
        "CANCELLED",
        "CANCELLING",
        "CANCELLING",
        "SUCCEEDED",
    ]
    assert job_events(session, queued)[-1] == ("QUEUED", "CANCELLED", "cancelled with sweep lr")
    assert job_events(session, running)[-1] == (
        "RUNNING",
        "CANCELLING",
        "cancelled with sweep lr; stopping the attempt",
    )
    # Due for the scheduler's look now, as a cancelled job's attempt is.
    assert job_attempts(session, running)[0].lease_expires_at is None
    # All of it is one transaction: the sweep's event and its trials' are
    # written by the one cancel, none by anyone else.
    assert len(job_events(session, done)) == 1

    again = cancel_job(session, Caller.local_admin(), sweep_id)
    assert again.job.status == "CANCELLING"
    assert len(job_events(session, sweep_id)) == 2


def test_a_queued_sweep_cancels_at_once(session, submit):
    sweep_id = submit(sweep_document()).job.id
    assert cancel_job(session, Caller.local_admin(), sweep_id).job.status == "CANCELLED"
    assert job_events(session, sweep_id)[-1] == ("QUEUED", "CANCELLED", "cancelled by local")


def test_a_failing_cascade_leaves_the_sweep_as_it_was(session, submit, monkeypatch):
    from trainplane.services import sweeps

    sweep_id = submit(sweep_document()).job.id
    trial = add_trial(session, sweep_id, 1)
    with session.begin():
        session.execute(update(Job).where(Job.id == sweep_id).values(status="RUNNING"))

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away mid-cancel")

    monkeypatch.setattr(sweeps, "set_status_many", broken)
    with pytest.raises(RuntimeError):
        cancel_job(session, Caller.local_admin(), sweep_id)
    assert (job_row(session, sweep_id).status, job_row(session, trial).status) == (
        "RUNNING",
        "QUEUED",
    )
    assert len(job_events(session, sweep_id)) == 1


def test_placement_places_trials_and_never_the_sweep(session, submit):
    make_cluster(session, gpus=8)
    sweep_id = submit(sweep_document()).job.id
    trial = add_trial(session, sweep_id, 1)
    with read_only(session):
        # The queue that placement and fair share order holds no sweep.
        assert [demand.job_id for demand in load_queue(session)] == [trial]

    placed = place_queued_jobs(session, utcnow()).placed

    assert [job_id for job_id, _ in placed] == [trial]
    assert job_row(session, sweep_id).status == "QUEUED"
    assert job_attempts(session, sweep_id) == []
    session.expunge_all()
    with read_only(session):
        sweep = session.get_one(Job, sweep_id)
        assert queue.queue_views(session, [sweep]) == {}
