"""``trainplane.Client`` against a real server: every method once, with typed
answers, pagination, idempotency, and the error each refusal maps to."""

from __future__ import annotations

import base64
import hashlib
import pickle
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import yaml

import trainplane
from tests.fuzz.live_server import BOOTSTRAP_TOKEN
from tests.sdk.conftest import spec
from trainplane.code_bundles import build_bundle, bundle_of_folder
from trainplane.jobs.spec import parse_spec
from trainplane.net import free_port
from trainplane.sdk.installation_models import Cluster, TokenCreated
from trainplane.sdk.local_files import LocalFilesError
from trainplane.sdk.models import Job, JobStatus, LogEvent, Page
from trainplane.storage.backends import LocalStorage
from trainplane.storage.checkpoints import FileEntry, Manifest, write_manifest


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_submit_read_cancel_and_the_events(admin, project):
    job = admin.submit(spec("first", project))

    assert isinstance(job, Job) and job.status is JobStatus.QUEUED and not job.is_terminal
    assert job.spec["resources"]["gpus"] == 1 and job.tracking.experiment
    assert admin.job(job.id).id == job.id
    cancelled = admin.cancel(job.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.is_terminal
    with pytest.raises(trainplane.JobFailed, match=job.id):
        cancelled.raise_for_status()
    events = admin.events(job.id, page_size=1)  # one page per event
    assert [(e.from_status, e.to_status) for e in events] == [
        (None, JobStatus.QUEUED),
        (JobStatus.QUEUED, JobStatus.CANCELLED),
    ]


def test_a_spec_file_a_spec_model_overrides_and_project(admin, project, tmp_path):
    path = tmp_path / "job.yaml"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(f"print({uuid.uuid4().int})\n")
    entrypoint = {"command": ["python", "train.py"], "working_dir": "code"}
    path.write_text(yaml.safe_dump(spec("from-file", "default", entrypoint=entrypoint)))

    from_file = admin.submit(path, project=project, overrides=["resources.gpus=2"])
    from_model = admin.submit(parse_spec(spec("from-model", project)), overrides=["priority=high"])

    assert from_file.project == project and from_file.gpus == 2
    # Relative to the file; sent as a bundle, as this server reads no local path.
    digest = "sha256:" + hashlib.sha256(bundle_of_folder(tmp_path / "code")).hexdigest()
    assert from_file.spec["entrypoint"]["code"] == digest
    assert "working_dir" not in from_model.spec["entrypoint"] or (
        from_model.spec["entrypoint"]["working_dir"] == "."
    )
    assert (from_model.name, from_model.priority) == ("from-model", "high")
    with pytest.raises(ValueError, match="expected key=value"):
        admin.submit(spec("x", project), overrides=["no-equals-sign"])


def test_submit_with_upload_runs_the_job_in_a_bundle_of_its_working_dir(admin, project, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(f"print({uuid.uuid4().int})\n")
    (code / "run.sh").write_text("#!/bin/sh\npython train.py\n")
    (code / "run.sh").chmod(0o755)
    path = tmp_path / "job.yaml"
    entrypoint = {"command": ["./run.sh"], "working_dir": "code"}
    path.write_text(yaml.safe_dump(spec(unique("uploaded"), project, entrypoint=entrypoint)))

    job = admin.submit(path, upload=True)

    assert (
        job.spec["entrypoint"]["code"]
        == "sha256:" + hashlib.sha256(bundle_of_folder(code)).hexdigest()
    )
    assert job.spec["entrypoint"]["working_dir"] == "."  # the bundle itself, no local path
    assert admin.bundle(project, job.spec["entrypoint"]["code"]).files == 2


def test_submit_with_upload_refuses_a_spec_without_a_folder_and_submits_nothing(
    admin, project, tmp_path
):
    name = unique("not-uploaded")
    missing = {"command": ["python", "train.py"], "working_dir": str(tmp_path / "gone")}
    with pytest.raises(LocalFilesError, match=r"entrypoint\.working_dir: .*gone does not exist"):
        admin.submit(spec(name, project, entrypoint=missing), upload=True)
    (tmp_path / "code").mkdir()
    no_module = {"function": "nowhere:main", "working_dir": str(tmp_path / "code")}
    with pytest.raises(LocalFilesError, match=r"entrypoint\.function: module 'nowhere'") as why:
        admin.submit(spec(name, project, entrypoint=no_module))
    assert isinstance(why.value, ValueError)
    # Nothing local: sent as it is, and the server has no such bundle.
    already = {"command": ["python", "train.py"], "code": "sha256:" + "0" * 64}
    with pytest.raises(trainplane.InvalidRequest, match=r"entrypoint\.code"):
        admin.submit(spec(name, project, entrypoint=already), upload=True)
    assert admin.list_jobs(project=project, name=name).items == []


def test_an_idempotency_key_returns_the_same_job_and_refuses_another_spec(admin, project):
    key = unique("key")
    first = admin.submit(spec("idem", project), idempotency_key=key)
    again = admin.submit(spec("idem", project), idempotency_key=key)

    assert again.id == first.id
    with pytest.raises(trainplane.Conflict) as refused:
        admin.submit(spec("idem", project, resources={"gpus": 2}), idempotency_key=key)
    assert refused.value.status == 409 and "Idempotency-Key" in refused.value.detail


def test_jobs_follow_the_cursor_across_pages(admin, project):
    name = unique("paged")
    ids = [admin.submit(spec(name, project)).id for _ in range(5)]
    admin.cancel(ids[0])

    first = admin.list_jobs(project=project, name=name, limit=2)
    listed = [j.id for j in admin.jobs(project=project, name=name, page_size=2)]

    assert isinstance(first, Page) and len(first.items) == 2 and first.next_cursor
    second = admin.list_jobs(project=project, name=name, limit=2, cursor=first.next_cursor)
    assert {j.id for j in first.items}.isdisjoint(j.id for j in second.items)
    assert sorted(listed) == sorted(ids) and len(set(listed)) == 5
    assert listed[:2] == [j.id for j in first.items]
    cancelled = admin.jobs(project=project, name=name, status=["CANCELLED", "FAILED"])
    assert [j.id for j in cancelled] == [ids[0]]


def test_plan_estimates_and_creates_nothing(admin, project):
    name = unique("planned")
    plan = admin.plan(spec(name, project, model={"parameters": 1e9}), overrides=["precision=bf16"])

    assert plan.valid and plan.spec["precision"] == "bf16"
    assert plan.placement.can_start_now is False and plan.placement.reason
    assert plan.memory is not None and plan.memory.total_gb > 0
    assert plan.strategy.chosen and plan.cost.basis
    assert list(admin.jobs(project=project, name=name)) == []


def test_wait_reports_changes_and_gives_up_at_the_timeout(admin, project):
    job = admin.submit(spec("waited", project))
    seen: list[Job] = []

    with pytest.raises(trainplane.WaitTimeout) as timed_out:
        admin.wait(job.id, timeout=0.3, poll_interval=0.1, on_progress=seen.append)
    admin.cancel(job.id)
    ended = admin.wait(job.id, on_progress=seen.append)

    assert isinstance(timed_out.value, TimeoutError)
    assert timed_out.value.job.status is JobStatus.QUEUED
    assert ended.status is JobStatus.CANCELLED
    assert [j.status for j in seen] == [JobStatus.QUEUED, JobStatus.CANCELLED]


def test_logs_and_following_them_to_the_end(admin, project, live_server):
    job = admin.submit(spec("logged", project))
    assert admin.logs(job.id) == ""
    live_server.start_attempt(job.id, log="step 1\nstep 2")
    admin.cancel(job.id)

    events = list(admin.follow_logs(job.id))

    assert admin.logs(job.id, attempt=1) == "step 1\nstep 2"
    assert [e.event for e in events] == ["status", "attempt", "log", "end"]
    assert events[1].attempt == 1 and events[2].lines == ["step 1", "step 2"]
    assert events[-1] == LogEvent(event="end", status="CANCELLED", reason=events[-1].reason)


def test_metrics_pages_and_the_function_result(admin, project, live_server):
    job = admin.submit(spec("measured", project))
    with pytest.raises(trainplane.NotFound):
        admin.result(job.id)
    attempt = live_server.start_attempt(job.id)
    points = [{"step": s, "time": 1e9 + s, "metrics": {"loss": 1 / s}} for s in range(1, 6)]
    live_server.report("POST", job.id, attempt, "progress", {"total_steps": 9, "points": points})
    value = base64.b64encode(pickle.dumps({"loss": 0.2})).decode()
    returned = {"outcome": "returned", "rank": 0, "value": value}
    live_server.report("PUT", job.id, attempt, "result", returned)

    metrics = admin.metrics(job.id, page_size=2)  # three pages
    result = admin.result(job.id)

    assert [p.step for p in metrics.points] == [1, 2, 3, 4, 5] and metrics.next_cursor is None
    assert metrics.progress is not None and metrics.progress.step == 5
    assert admin.job(job.id).progress.total_steps == 9  # type: ignore[union-attr]
    assert (result.outcome, result.attempt_id, result.rank) == ("returned", attempt, 0)
    assert result.pickled is not None and pickle.loads(result.pickled) == {"loss": 0.2}


def test_checkpoints_compare_and_the_registered_model(admin, project, live_server):
    one = admin.submit(spec("ckpt", project))
    two = admin.submit(spec("ckpt", project, resources={"gpus": 2}))
    # The job's own folder, under its project's storage root on the server.
    storage = admin.checkpoints(one.id).storage
    assert f"/{project}/{one.id}" in storage
    data = b"weights"
    entry = FileEntry(path="model.pt", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    folder = LocalStorage(storage)
    folder.write_bytes("step-10/model.pt", data)
    manifest = Manifest(step=10, strategy="ddp", format="state-dict", world_size=1, files=[entry])
    write_manifest(folder, manifest)
    assert admin.model(one.id) is None
    live_server.register_model(one.id, "sdk-model", "3")

    listing = admin.checkpoints(one.id)
    comparison = admin.compare([one.id, two.id])
    model = admin.model(one.id)

    assert [(c.step, c.size_bytes, c.files) for c in listing.checkpoints] == [(10, len(data), 1)]
    assert listing.job_id == one.id and listing.storage == storage
    assert [j.id for j in comparison.jobs] == [one.id, two.id]
    assert "resources.gpus" in {d.field for d in comparison.spec_differences}
    assert model is not None and model.uri == "models:/sdk-model/3"


def test_code_bundles(admin, project):
    data = build_bundle([("train.py", f"print({uuid.uuid4().int})\n".encode())])

    stored = admin.upload_bundle(project, data)
    again = admin.upload_bundle(project, data)

    assert stored.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert (stored.project, stored.files, stored.size_bytes) == (project, 1, len(data))
    assert again == stored == admin.bundle(project, stored.digest)
    with pytest.raises(trainplane.NotFound):
        admin.bundle(project, "sha256:" + "0" * 64)


def test_clusters(admin):
    name = unique("gpu")
    address = "http://127.0.0.1:9"
    added = admin.add_cluster(name, address, gpus=4, gpus_per_node=2, labels={"z": "a"})
    with pytest.raises(trainplane.Conflict):
        admin.add_cluster(name, "http://127.0.0.1:9", gpus=4)
    updated = admin.put_cluster(name, "http://127.0.0.1:9", gpus=4, price_per_gpu_hour=2.5)

    assert isinstance(added, Cluster) and (added.gpus, added.gpus_per_node) == (4, 2)
    assert added.labels == {"z": "a"} and updated.id == added.id
    assert updated.price_per_gpu_hour == 2.5
    assert name in {c.name for c in admin.clusters().items}
    admin.remove_cluster(name)
    assert name not in {c.name for c in admin.clusters().items}


def test_projects(admin, tmp_path):
    name = unique("proj")
    created = admin.create_project(name, description="for the SDK")
    limited = admin.update_project(name, max_gpus=8, weight=2.0)
    unlimited = admin.update_project(name, max_gpus=None)
    moved = admin.update_project(name, storage=str(tmp_path / "roots" / name))
    back = admin.update_project(name, storage=None)

    assert (created.name, created.description, created.max_gpus) == (name, "for the SDK", None)
    assert (limited.max_gpus, limited.weight) == (8, 2.0) and unlimited.max_gpus is None
    assert created.storage is None and created.storage_root.endswith(f"/{name}")
    assert (moved.storage, moved.storage_root) == ((str(tmp_path / "roots" / name),) * 2)
    assert back.storage is None and back.storage_root == created.storage_root
    assert name in {p.name for p in admin.projects()}
    with pytest.raises(trainplane.Conflict):
        admin.create_project(name)


def test_tokens_whoami_and_audit(admin, project, live_server):
    created = admin.create_token(unique("viewer"), project=project, role="viewer", expires_in="1d")
    assert isinstance(created, TokenCreated) and created.secret == created.token
    assert created.grants[0].project == project and created.grants[0].role == "viewer"
    assert created.expires_at is not None
    with trainplane.Client(live_server.url, created.secret) as viewer:
        me = viewer.whoami()
        assert (me.token_id, me.roles, me.everywhere) == (created.id, {project: "viewer"}, None)
        with pytest.raises(trainplane.Forbidden) as refused:
            viewer.submit(spec("not-allowed", project))
        assert refused.value.status == 403
        assert created.id in {t.id for t in admin.tokens()}
        admin.revoke_token(created.id)
        with pytest.raises(trainplane.Unauthorized):
            viewer.whoami()
    assert admin.whoami().everywhere == "admin"
    events = list(admin.audit(page_size=2))
    assert len({e.id for e in events}) == len(events) > 2
    assert {"token.create", "token.revoke"} <= {e.action for e in events}
    assert [e.id for e in admin.audit(after=events[-2].id)] == [events[-1].id]


def test_usage_models_health_and_prometheus(admin, live_server):
    own = admin.create_project(unique("usage")).name  # no other test's jobs
    ran = admin.submit(spec("ran", own))
    live_server.start_attempt(ran.id)
    names = sorted(unique("model") for _ in range(2))
    for name in names:
        live_server.register_model(admin.submit(spec("registers", own)).id, name, "1")

    since = datetime.now(UTC) - timedelta(days=2)
    usage = admin.usage(since=since, project=own)
    page = admin.list_models(limit=1)
    listed = [m.name for m in admin.models(page_size=1)]

    assert usage.since == since and usage.until > since and len(usage.by_day) >= 2
    assert [j.id for j in usage.by_job] == [ran.id] and usage.total.jobs == 1
    assert usage.by_project[0].project == own and usage.total.gpu_hours > 0
    assert len(page.items) == 1 and page.next_cursor == page.items[0].name
    assert set(names) <= set(listed) and listed == sorted(set(listed))
    assert admin.health().status == "ok"
    ready = admin.ready()
    assert ready.status == "ok" and ready.checks["database"] == "ok"
    assert "# TYPE" in admin.prometheus_metrics()


def test_refusals_map_to_their_errors(admin, project, live_server):
    with pytest.raises(trainplane.Unauthorized) as unauthenticated:
        trainplane.Client(live_server.url, "not-a-token").job("x")
    with pytest.raises(trainplane.NotFound) as missing:
        admin.job("no-such-job")
    with pytest.raises(trainplane.InvalidRequest) as invalid:
        admin.submit(spec("bad", project, resources={"gpus": 0}))
    with pytest.raises(trainplane.PayloadTooLarge):
        admin.submit(spec("big", project, entrypoint={"command": ["x" * (2 << 20)]}))
    cancelled = admin.cancel(admin.submit(spec("twice", project)).id)
    with pytest.raises(trainplane.Conflict, match="already ended"):
        admin.cancel(cancelled.id)

    assert unauthenticated.value.status == 401
    assert unauthenticated.value.headers["www-authenticate"] == "Bearer"
    assert str(missing.value).startswith("404 Not found: ")
    assert isinstance(missing.value, trainplane.TrainplaneError)
    assert [e.field for e in invalid.value.errors] == ["resources.gpus"]
    assert "resources.gpus" in str(invalid.value) and invalid.value.body["status"] == 422


def test_an_unreachable_server_is_connection_failed():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(trainplane.ConnectionFailed, match="cannot reach trainplane") as failed:
        trainplane.Client(url).health()
    assert failed.value.status == 0


def test_the_environment_names_the_server_and_token(live_server, monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINPLANE_HOME", str(tmp_path))  # no local token file to fall back on
    monkeypatch.delenv("TRAINPLANE_URL", raising=False)
    monkeypatch.delenv("TRAINPLANE_TOKEN", raising=False)
    assert trainplane.Client().url == "http://127.0.0.1:8080"

    monkeypatch.setenv("TRAINPLANE_URL", live_server.url + "/")
    monkeypatch.setenv("TRAINPLANE_TOKEN", BOOTSTRAP_TOKEN)
    with trainplane.Client() as client:
        assert client.url == live_server.url
        assert client.whoami().everywhere == "admin"
