"""The sweeps' controller on a real database: a sweep starts, keeps
``search.parallel`` trials live until ``search.trials`` exist, ends with its
best trial named (or FAILED when none reported the objective), ends CANCELLED
once every trial has after a cancel, and shares a cluster fairly with another
project through the real placement. No cluster: trials end as the scheduler
would record it."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from tests.factories import insert_jobs, job_events, job_row, make_cluster, make_project
from tests.sweep_rows import sweep_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Cluster, Job, JobAttempt, JobTracking, SweepTrial
from trainplane.jobs.spec import TrainSpec, parse_spec
from trainplane.jobs.states import JobStatus
from trainplane.jobs.sweep_spec import SweepSpec
from trainplane.scheduler.loop import Scheduler
from trainplane.services.access import Caller
from trainplane.services.file_access import FileAccess
from trainplane.services.jobs import cancel_job, submit_job
from trainplane.services.placement import place_queued_jobs
from trainplane.services.sweep_controller import advance_sweeps

LR = {"entrypoint.args.lr": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-1}}


def spec(*, project: str = "default", parameters: dict = LR, **search) -> dict:
    """A sweep named lr of 2-GPU trials over examples/mlp's learning rate."""
    search = {"algorithm": "random", "trials": 5, "parallel": 2, "seed": 3, **search}
    return sweep_spec("lr", project=project, parameters=parameters, search=search)


@pytest.fixture
def submit(session, settings):
    access = FileAccess.from_settings(settings)

    def submit(document: dict) -> str:
        return submit_job(session, Caller.local_admin(), parse_spec(document), access=access).job.id

    return submit


def advance(session) -> list[str]:
    session.expunge_all()
    return advance_sweeps(session, utcnow())


def trials(session, sweep_id: str) -> list[tuple[SweepTrial, Job]]:
    """The sweep's trials, by number."""
    session.expunge_all()
    with session.begin():
        return [
            tuple(row)
            for row in session.execute(
                select(SweepTrial, Job)
                .join(Job, Job.id == SweepTrial.job_id)
                .where(SweepTrial.sweep_id == sweep_id)
                .order_by(SweepTrial.number)
            )
        ]


def end(session, job_id: str, status: JobStatus, *, value=None, pruned=None) -> None:
    """A trial ends as the scheduler and the progress channel would leave it
    (directly, like the factories: the transitions have tests of their own)."""
    attempt = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED"}.get(status.value, "STOPPED")
    with session.begin():
        session.execute(
            update(Job).where(Job.id == job_id).values(status=status.value, finished_at=utcnow())
        )
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.job_id == job_id, JobAttempt.finished_at.is_(None))
            .values(status=attempt, finished_at=utcnow())
        )
        session.execute(
            update(SweepTrial)
            .where(SweepTrial.job_id == job_id)
            .values(last_value=value, best_value=value, pruned_reason=pruned)
        )


def test_a_sweep_starts_and_keeps_parallel_trials_live(session, submit):
    sweep_id = submit(spec(trials=5, parallel=2))
    assert job_row(session, sweep_id).status == "QUEUED"

    advance(session)

    sweep = job_row(session, sweep_id)
    assert sweep.status == "RUNNING"
    started = ("QUEUED", "RUNNING", "searching: 5 trials, 2 at once")
    assert job_events(session, sweep_id)[-1] == started
    assert sweep.reason == "searching: 2 of 5 trials created, 2 running"
    with session.begin():
        assert session.get(JobTracking, sweep_id) is not None  # the MLflow parent run
    made = trials(session, sweep_id)
    assert [(t.number, j.name, j.parent_id, j.status) for t, j in made] == [
        (1, "lr-1", sweep_id, "QUEUED"),
        (2, "lr-2", sweep_id, "QUEUED"),
    ]
    lrs = [t.parameters["entrypoint.args.lr"] for t, _ in made]
    assert lrs[0] != lrs[1]
    # Each trial's spec is the template with its parameters set.
    assert [j.spec["entrypoint"]["args"]["lr"] for _, j in made] == lrs

    # The cap holds however often the controller looks.
    advance(session)
    assert len(trials(session, sweep_id)) == 2


def test_trials_are_refilled_as_they_end_and_the_best_one_is_named(session, submit):
    sweep_id = submit(spec(trials=4, parallel=2))
    advance(session)
    (_, j1), (_, j2) = trials(session, sweep_id)
    end(session, j1.id, JobStatus.SUCCEEDED, value=0.5)
    advance(session)
    assert [t.number for t, _ in trials(session, sweep_id)] == [1, 2, 3]
    # A trial that failed after its own retries is counted, not fatal.
    end(session, j2.id, JobStatus.FAILED)
    advance(session)
    made = trials(session, sweep_id)
    assert [t.number for t, _ in made] == [1, 2, 3, 4]
    assert job_row(session, sweep_id).reason == "searching: 4 of 4 trials created, 2 running"
    end(session, made[2][1].id, JobStatus.CANCELLED, pruned="pruned at rung 0 (step 10): ...")
    advance(session)
    assert job_row(session, sweep_id).status == "RUNNING"  # trial 4 still runs
    end(session, made[3][1].id, JobStatus.SUCCEEDED, value=0.25)

    advance(session)

    sweep = job_row(session, sweep_id)
    assert sweep.status == "SUCCEEDED"
    assert sweep.reason == "4 trials: 2 succeeded, 1 pruned, 1 failed; best lr-4: loss 0.25"
    assert len(trials(session, sweep_id)) == 4
    assert advance(session) == []  # ended: nothing more to do


def test_a_sweep_with_register_model_succeeds_once_its_best_model_is_registered(session, submit):
    document = spec(trials=1, parallel=1)
    document["register_model"] = {"name": "lr-best", "alias": "best"}
    sweep_id = submit(document)
    advance(session)
    ((_, trial),) = trials(session, sweep_id)
    end(session, trial.id, JobStatus.SUCCEEDED, value=0.5)

    advance(session)
    advance(session)  # waiting changes nothing however often it looks

    sweep = job_row(session, sweep_id)
    assert sweep.status == "RUNNING"
    assert sweep.reason.endswith("best lr-1: loss 0.5; registering its model as lr-best")
    # The tracking loop registered it (scheduler.tracking).
    with session.begin():
        session.execute(
            update(JobTracking).where(JobTracking.job_id == sweep_id).values(model_version="1")
        )
    advance(session)
    sweep = job_row(session, sweep_id)
    assert (sweep.status, sweep.reason) == (
        "SUCCEEDED",
        "1 trial: 1 succeeded, 0 pruned, 0 failed; best lr-1: loss 0.5",
    )


def test_without_tracking_a_sweep_says_its_model_was_not_registered(session, submit):
    document = spec(trials=1, parallel=1)
    document["register_model"] = {"name": "lr-best"}
    sweep_id = submit(document)
    advance(session)
    ((_, trial),) = trials(session, sweep_id)
    end(session, trial.id, JobStatus.SUCCEEDED, value=0.5)
    session.expunge_all()
    advance_sweeps(session, utcnow(), tracking=False)
    sweep = job_row(session, sweep_id)
    assert sweep.status == "SUCCEEDED"
    assert sweep.reason.endswith(
        "its model was not registered: experiment tracking is off on this server"
    )


def test_a_sweep_whose_trials_all_failed_fails(session, submit):
    sweep_id = submit(spec(trials=2, parallel=2))
    advance(session)
    for _, job in trials(session, sweep_id):
        end(session, job.id, JobStatus.FAILED)
    advance(session)
    sweep = job_row(session, sweep_id)
    assert (sweep.status, sweep.reason) == (
        "FAILED",
        "2 trials: 0 succeeded, 0 pruned, 2 failed; no trial reported loss",
    )


def test_a_grid_sweep_ends_with_its_grid(session, submit):
    grid = {"entrypoint.args.lr": {"values": [0.1, 0.01, 0.001]}}
    sweep_id = submit(spec(algorithm="grid", trials=6, parallel=6, parameters=grid))
    advance(session)
    made = trials(session, sweep_id)
    assert sorted(t.parameters["entrypoint.args.lr"] for t, _ in made) == [0.001, 0.01, 0.1]
    assert job_row(session, sweep_id).reason == "searching: 3 of 3 trials created, 3 running"
    for (_, job), value in zip(made, (0.3, 0.2, 0.4), strict=True):
        end(session, job.id, JobStatus.SUCCEEDED, value=value)
    advance(session)
    sweep = job_row(session, sweep_id)
    assert sweep.status == "SUCCEEDED"
    assert sweep.reason == "3 trials: 3 succeeded, 0 pruned, 0 failed; best lr-2: loss 0.2"


def test_a_cancelled_sweep_ends_once_every_trial_has(session, submit):
    make_cluster(session, gpus=2)
    sweep_id = submit(spec(trials=4, parallel=2))
    advance(session)
    placed = place_queued_jobs(session, utcnow()).placed
    (first, _), (second, _) = [(j.id, j.status) for _, j in trials(session, sweep_id)]
    assert [job_id for job_id, _ in placed] == [first]  # room for one: the second waits

    cancel_job(session, Caller.local_admin(), sweep_id)
    assert job_row(session, sweep_id).status == "CANCELLING"
    assert (job_row(session, first).status, job_row(session, second).status) == (
        "CANCELLING",
        "CANCELLED",
    )
    # A straggler (a trial queued back just as the cancel landed) is cancelled
    # by the controller; the sweep waits for the one still stopping.
    with session.begin():
        session.execute(update(Job).where(Job.id == second).values(status="QUEUED"))
    advance(session)
    assert job_row(session, second).status == "CANCELLED"
    assert job_events(session, second)[-1][1:] == ("CANCELLED", "cancelled with sweep lr")
    assert job_row(session, sweep_id).status == "CANCELLING"
    advance(session)  # again: nothing cancelled twice
    assert [e[1] for e in job_events(session, second)].count("CANCELLED") == 2
    assert len(trials(session, sweep_id)) == 2  # no new trial for a cancelled sweep

    end(session, first, JobStatus.CANCELLED)
    advance(session)
    sweep = job_row(session, sweep_id)
    assert (sweep.status, sweep.reason) == ("CANCELLED", "cancelled; its trials ended: 2 cancelled")


def test_a_sweeps_trials_get_their_projects_fair_share(session, submit):
    """Four 2-GPU trials queued first, four of another project's jobs after,
    one 8-GPU cluster: each project gets half, as any two projects would."""
    make_cluster(session, gpus=8)
    make_project(session, "search")
    others = make_project(session, "others")
    sweep_id = submit(spec(project="search", trials=8, parallel=4))
    advance(session)
    ours = {j.id for _, j in trials(session, sweep_id)}
    assert len(ours) == 4
    theirs = set(
        insert_jobs(session, 4, project_id=others.id, spec=_job("other", project="others"))
    )

    placed = {job_id for job_id, _ in place_queued_jobs(session, utcnow()).placed}

    assert (len(placed & ours), len(placed & theirs)) == (2, 2)
    advance(session)
    assert len(trials(session, sweep_id)) == 4  # queued trials count against parallel


def test_a_trial_spec_that_does_not_validate_fails_the_sweep(session, submit, monkeypatch):
    sweep_id = submit(spec(trials=3, parallel=2))
    advance(session)
    assert len(trials(session, sweep_id)) == 2

    def broken(self, parameters, number):
        document = self.trial_document(parameters, number)
        return TrainSpec.model_validate({**document, "retries": 1} if number == 3 else document)

    # Every combination is validated at submit: a trial spec that fails later
    # (a server upgrade that tightened a field) is what this stands for.
    monkeypatch.setattr(SweepSpec, "trial_spec", broken)
    (_, j1), (_, j2) = trials(session, sweep_id)
    end(session, j1.id, JobStatus.SUCCEEDED, value=0.1)
    advance(session)

    sweep = job_row(session, sweep_id)
    assert sweep.status == "FAILED"
    assert sweep.reason.startswith("trial 3's parameters entrypoint.args.lr=")
    assert "make an invalid spec: `retries`" in sweep.reason
    assert job_row(session, j2.id).status == "CANCELLED"  # nobody would read it
    assert len(trials(session, sweep_id)) == 2


def test_a_trial_number_taken_meanwhile_writes_nothing(session, submit):
    """The unique (sweep, number) is the last guard: a controller that counted
    wrong inserts nothing and looks again."""
    sweep_id = submit(spec(trials=3, parallel=1))
    advance(session)
    ((_, job),) = trials(session, sweep_id)
    end(session, job.id, JobStatus.SUCCEEDED, value=0.1)
    with session.begin():
        session.execute(update(SweepTrial).where(SweepTrial.job_id == job.id).values(number=2))

    notes = advance(session)

    assert notes == [f"sweep {sweep_id}: IntegrityError; looking again next pass"]
    assert len(trials(session, sweep_id)) == 1
    assert job_row(session, sweep_id).status == "RUNNING"


def test_one_scheduler_pass_starts_a_sweep_and_places_its_first_trials(
    session, sessions, settings, submit
):
    cluster = make_cluster(session, gpus=4)
    with session.begin():
        session.get_one(Cluster, cluster.id).checked_at = utcnow()  # no probe this pass
    sweep_id = submit(spec(trials=3, parallel=2))
    scheduler = Scheduler(settings, sessions)
    try:
        scheduler.run_once()
    finally:
        scheduler.pool.shutdown()
    assert job_row(session, sweep_id).status == "RUNNING"
    assert [j.status for _, j in trials(session, sweep_id)] == ["STARTING", "STARTING"]


@pytest.mark.postgres_only
def test_a_sweep_locked_elsewhere_is_skipped(sessions, session, submit):
    """Two schedulers never advance one sweep at once: the second skips the
    sweep the first holds, and finds it again next pass."""
    sweep_id = submit(spec(trials=3, parallel=2))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with sessions() as other, other.begin():
            other.execute(select(Job).where(Job.id == sweep_id).with_for_update())
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        assert advance(session) == []
        assert job_row(session, sweep_id).status == "QUEUED"
    finally:
        release.set()
        holder.join(30)
    advance(session)
    assert len(trials(session, sweep_id)) == 2


def _job(name: str, **fields) -> dict:
    return {
        "kind": "train",
        "name": name,
        "entrypoint": {"command": ["true"]},
        "resources": {"gpus": 2},
        **fields,
    }
