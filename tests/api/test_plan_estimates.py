"""``plan`` with memory estimates, ``strategy: auto`` at submit, and jobs
refused because they fit no GPU, against the real app and database: an idle
cluster, a busy one (queue position and expected start) and an impossible job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from tests.factories import insert_jobs, make_attempt, make_cluster, small_spec
from trainplane.db.base import utcnow
from trainplane.db.models import Job, JobAttempt
from trainplane.jobs.states import JobStatus
from trainplane.services.placement import place_queued_jobs


def _spec(parameters, *, strategy="auto", gpus=8, **extra):
    return small_spec(
        "llm",
        gpus=gpus,
        precision="bf16",
        strategy={"type": strategy},
        model={"parameters": parameters},
        **extra,
    ) | {"resources": {"gpus": gpus, "gpus_per_node": 8}}


@pytest.fixture
def h100(session):
    return make_cluster(
        session, "h100", gpus=8, accelerator="H100", gpu_memory_gb=80, price_per_gpu_hour=2.5
    )


def _jobs(session):
    with session.begin():
        return session.scalar(select(func.count()).select_from(Job))


def test_plan_on_an_idle_cluster_picks_ddp_for_a_small_model(api, h100):
    body = api.post("/v1/jobs/plan", json=_spec(1e8, max_runtime="2h"))
    assert body.status_code == 200, body.text
    plan = body.json()
    assert plan["strategy"]["requested"] == "auto"
    assert plan["strategy"]["chosen"] == "ddp"
    assert plan["strategy"]["spec"] == {"type": "ddp"}
    assert plan["strategy"]["compared_with"] == "h100"
    memory = plan["memory"]
    assert memory["strategy"] == "ddp" and memory["gpu_memory_gb"] == 80.0
    # 16 bytes per parameter replicated, the DDP buckets, the CUDA context.
    assert memory["per_gpu_gb"]["parameters"] == 0.4
    assert memory["per_gpu_gb"]["optimizer_states"] == 0.8
    assert memory["total_gb"] == pytest.approx(sum(memory["per_gpu_gb"].values()), abs=0.01)
    assert memory["fraction"] == pytest.approx(memory["total_gb"] / 80, abs=1e-3)
    placement = plan["placement"]
    assert placement["can_start_now"] and placement["cluster"] == "h100"
    assert placement["expected_start_in_seconds"] == 0
    cost = plan["cost"]
    assert cost["cluster"] == "h100" and cost["price_per_gpu_hour"] == 2.5
    assert cost["expected_seconds"] is None  # no earlier run to learn from
    assert cost["max_cost"] == pytest.approx(2 * 8 * 2.5)  # 2 h on 8 GPUs at 2.50
    assert "no earlier run" in cost["basis"]


def test_plan_shards_a_13b_full_fine_tune_and_says_why(api, h100):
    plan = api.post("/v1/jobs/plan", json=_spec(1.3e10)).json()
    strategy = plan["strategy"]
    assert strategy["chosen"] == "fsdp"
    assert [(c["strategy"], c["fits"]) for c in strategy["candidates"]] == [
        ("ddp", False),
        ("fsdp", True),
    ]
    assert strategy["reason"].startswith("ddp needs ")
    assert "picked fsdp" in strategy["reason"]
    assert plan["memory"]["total_gb"] <= 0.9 * 80
    assert any("activations not counted" in n for n in plan["memory"]["notes"])


def test_submit_resolves_auto_and_records_the_choice(api, session, h100):
    created = api.post("/v1/jobs", json=_spec(1.3e10))
    assert created.status_code == 201, created.text
    job = api.get(f"/v1/jobs/{created.json()['id']}").json()
    assert job["strategy"] == "fsdp"
    assert job["spec"]["strategy"]["type"] == "fsdp"  # what the runtime will run
    assert "picked fsdp" in job["strategy_reason"]
    events = api.get(f"/v1/jobs/{job['id']}/events").json()["items"]
    assert events[-1]["reason"] == f"strategy auto: {job['strategy_reason']}"
    # Submitting the same spec with the same key is a replay, not a new job.
    headers = {"Idempotency-Key": "auto-1"}
    first = api.post("/v1/jobs", json=_spec(1.3e10), headers=headers).json()["id"]
    again = api.post("/v1/jobs", json=_spec(1.3e10), headers=headers)
    assert again.status_code == 200 and again.json()["id"] == first


def test_an_impossible_job_is_refused_at_plan_and_submit_with_the_numbers(api, session, h100):
    before = _jobs(session)
    for path in ("/v1/jobs/plan", "/v1/jobs"):
        answer = api.post(path, json=_spec(1e13))
        assert answer.status_code == 422, answer.text
        error = answer.json()["errors"][0]
        assert error["field"] == "model.parameters"
        assert "1e+13 parameters on 8 GPUs fit no cluster" in error["message"]
        assert "80.0 GB" in error["message"]
    assert _jobs(session) == before


def test_an_explicit_strategy_that_cannot_fit_is_refused_with_a_better_one(api, session, h100):
    before = _jobs(session)
    answer = api.post("/v1/jobs", json=_spec(1.3e10, strategy="ddp"))
    assert answer.status_code == 422
    error = answer.json()["errors"][0]
    assert error["field"] == "strategy.type"
    assert "ddp needs about" in error["message"]
    assert "strategy fsdp would need" in error["message"]
    assert _jobs(session) == before
    # Ten trillion fits nothing: the size is what to change.
    answer = api.post("/v1/jobs", json=_spec(1e13, strategy="ddp"))
    assert answer.json()["errors"][0]["field"] == "model.parameters"


def test_a_job_without_a_model_size_is_planned_without_an_estimate(api, h100):
    spec = small_spec("plain", gpus=8) | {"resources": {"gpus": 8}}
    plan = api.post("/v1/jobs/plan", json=spec).json()
    assert plan["memory"] is None
    assert plan["strategy"]["chosen"] == "ddp"
    assert "give model.parameters" in plan["strategy"]["reason"]


def test_plan_on_a_busy_cluster_gives_the_position_and_expected_start(api, session, h100):
    """A running job is half way (50 of 100 steps in 100 s): it frees the 8
    GPUs in about 100 s. A job queued ahead holds them for its max_runtime
    of 1 h, so the planned job starts in about 1 h 100 s."""
    (running,) = insert_jobs(session, 1, status=JobStatus.RUNNING, spec=_spec(1e8))
    attempt = make_attempt(session, running, cluster_id=h100.id)
    now = utcnow()
    with session.begin():
        session.execute(
            update(JobAttempt)
            .where(JobAttempt.id == attempt.id)
            .values(
                started_at=now - timedelta(seconds=100),
                progress_step=50,
                total_steps=100,
                last_heartbeat_at=now,
            )
        )
    insert_jobs(session, 1, spec=_spec(1e8, max_runtime="1h"))

    plan = api.post("/v1/jobs/plan", json=_spec(1e8)).json()
    placement = plan["placement"]
    assert not placement["can_start_now"] and placement["queue_position"] == 2
    assert placement["expected_start_in_seconds"] == pytest.approx(3600 + 100, abs=5)
    assert "progress" in placement["expected_start_basis"]

    # Without the queued job's max_runtime nobody can tell when it ends.
    with session.begin():
        session.execute(update(Job).where(Job.status == "QUEUED").values(max_runtime_seconds=None))
    unknown = api.post("/v1/jobs/plan", json=_spec(1e8)).json()["placement"]
    assert unknown["expected_start_in_seconds"] is None
    assert unknown["expected_start_basis"].startswith("unknown")


def test_cost_comes_from_earlier_runs_of_the_same_job(api, session, h100):
    """Two earlier runs of 'llm' on 8 GPUs did 100 steps in 200 s and 400 s:
    the median throughput (0.375 steps/s) over the job's 300 steps."""
    for seconds in (200, 400):
        (job_id,) = insert_jobs(session, 1, status=JobStatus.SUCCEEDED, spec=_spec(1e8), name="llm")
        attempt = make_attempt(session, job_id, status="SUCCEEDED", cluster_id=h100.id)
        start = utcnow() - timedelta(hours=1)
        with session.begin():
            session.execute(
                update(JobAttempt)
                .where(JobAttempt.id == attempt.id)
                .values(
                    started_at=start,
                    finished_at=start + timedelta(seconds=seconds),
                    progress_step=100,
                )
            )
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(started_at=start, finished_at=start + timedelta(seconds=seconds))
            )
    spec = _spec(1e8)
    spec["entrypoint"] = spec["entrypoint"] | {"args": {"max_steps": 300}}
    cost = api.post("/v1/jobs/plan", json=spec).json()["cost"]
    assert cost["expected_seconds"] == pytest.approx(300 / 0.375, rel=1e-3)
    assert cost["expected_cost"] == pytest.approx(800 * 8 / 3600 * 2.5, rel=1e-3)
    assert "median of 2 earlier runs of llm" in cost["basis"]
    # Without max_steps: the median duration of those runs.
    plain = api.post("/v1/jobs/plan", json=_spec(1e8)).json()["cost"]
    assert plain["expected_seconds"] == pytest.approx(300)


def test_a_named_strategy_over_auto_s_headroom_passes_with_a_warning(api, h100):
    """20B under FSDP2 needs about 98% of an 80 GB GPU: auto would not pick it,
    but a strategy the spec names runs unless it is over the whole GPU."""
    plan = api.post("/v1/jobs/plan", json=_spec(2e10, strategy="fsdp")).json()
    assert 0.9 < plan["memory"]["fraction"] <= 1.0
    assert "above the 90% of a GPU strategy auto stays under" in plan["strategy"]["reason"]
    roomy = api.post("/v1/jobs/plan", json=_spec(1e10, strategy="fsdp")).json()
    assert "may run out of memory" not in roomy["strategy"]["reason"]


def test_a_job_is_placed_only_on_gpus_its_estimate_fits(api, session):
    """13B under FSDP2 needs about 51 GB per GPU: not the 40 GB cluster, which
    plan and the scheduler both pass over for the 80 GB one."""
    make_cluster(session, "a40", gpus=8, accelerator="H100", gpu_memory_gb=40)
    make_cluster(session, "b80", gpus=8, accelerator="H100", gpu_memory_gb=80)
    spec = _spec(1.3e10, strategy="fsdp")
    plan = api.post("/v1/jobs/plan", json=spec).json()
    assert plan["placement"]["cluster"] == "b80"
    created = api.post("/v1/jobs", json=spec).json()
    with session.begin():
        needed = session.get_one(Job, created["id"]).gpu_memory_gb
    assert needed == pytest.approx(plan["memory"]["total_gb"], abs=0.01)
    placed = place_queued_jobs(session, utcnow()).placed
    assert [job for job, _ in placed] == [created["id"]]
    (attempt,) = api.get(f"/v1/jobs/{created['id']}").json()["attempts"]
    assert attempt["cluster"] == "b80"
