"""Who may do what: every endpoint against every kind of caller, on SQLite and
PostgreSQL, as one table of expected statuses.

Callers: no token, an expired one, a revoked one, a viewer, member and admin
of project ``alpha``, a member of another project (``beta``), and the
installation-wide bootstrap admin. A job of ``alpha`` is a 404 to anyone who
cannot see ``alpha``; a role too small for the action is a 403.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import update

from tests.factories import small_spec
from trainplane.api.app import create_app
from trainplane.code_bundles import build_bundle
from trainplane.config import Settings
from trainplane.db.access_models import ApiToken
from trainplane.db.base import utcnow

BOOTSTRAP = "bootstrap-secret-for-the-matrix"
CALLERS = ("none", "expired", "revoked", "viewer", "outsider", "member", "admin", "root")
UNAUTHENTICATED = {"none": 401, "expired": 401, "revoked": 401}


def everyone(status: int) -> dict[str, int]:
    """``status`` for every caller with a working token, 401 for the others."""
    return UNAUTHENTICATED | {c: status for c in CALLERS if c not in UNAUTHENTICATED}


def roles(
    ok: int,
    *,
    viewer: int = 403,
    outsider: int = 403,
    member: int | None = None,
    admin: int | None = None,
) -> dict[str, int]:
    return UNAUTHENTICATED | {
        "viewer": viewer,
        "outsider": outsider,
        "member": ok if member is None else member,
        "admin": ok if admin is None else admin,
        "root": ok,
    }


def root_only(ok: int) -> dict[str, int]:
    return roles(ok, member=403, admin=403)


def reads_alpha() -> dict[str, int]:
    """A read of something in alpha: hidden (404) from the outsider."""
    return roles(200, viewer=200, outsider=404)


@dataclass
class World:
    client: TestClient
    tokens: dict[str, str]
    job: str  # a job of alpha
    other_job: str  # another job of alpha
    counter: Iterator[int]
    bundle: str = ""  # the digest of a code bundle of alpha
    input: str = ""  # the digest of an input file of alpha

    def as_(self, caller: str) -> dict[str, str]:
        secret = self.tokens.get(caller)
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def root(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**self.as_("root"), **kwargs.pop("headers", {})}
        response = self.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    def fresh_job(self) -> str:
        return self.root(
            "POST", "/v1/jobs", json=small_spec(f"j{next(self.counter)}", 1) | {"project": "alpha"}
        )["id"]

    def fresh_name(self, prefix: str) -> str:
        return f"{prefix}-{next(self.counter)}"


def make_token(world: World, name: str, project: str | None, role: str, **extra: Any) -> dict:
    body = {"name": name, "project": project, "role": role, **extra}
    return world.root("POST", "/v1/tokens", json=body)


@pytest.fixture
def world(settings: Settings, session) -> Iterator[World]:
    secured = settings.model_copy(update={"bootstrap_token": SecretStr(BOOTSTRAP)})
    with TestClient(create_app(secured)) as client:
        world = World(client, {"root": BOOTSTRAP}, "", "", itertools.count())
        for project in ("alpha", "beta"):
            world.root("POST", "/v1/projects", json={"name": project})
        for caller, project, role in [
            ("viewer", "alpha", "viewer"),
            ("member", "alpha", "member"),
            ("admin", "alpha", "admin"),
            ("outsider", "beta", "member"),
            ("expired", "alpha", "admin"),
            ("revoked", "alpha", "admin"),
        ]:
            created = make_token(world, caller, project, role, expires_in=3600)
            world.tokens[caller] = created["token"]
            if caller == "revoked":
                world.root("DELETE", f"/v1/tokens/{created['id']}")
            if caller == "expired":
                with session.begin():
                    session.execute(
                        update(ApiToken)
                        .where(ApiToken.id == created["id"])
                        .values(expires_at=utcnow() - timedelta(seconds=1))
                    )
        world.root(
            "POST",
            "/v1/clusters",
            json={"name": "shared", "address": "http://127.0.0.1:9", "gpus": 4},
        )
        world.job, world.other_job = world.fresh_job(), world.fresh_job()
        world.bundle = world.root("POST", "/v1/projects/alpha/bundles", **fresh_bundle(world))[
            "digest"
        ]
        method, path, upload = fresh_input(world)
        world.input = world.root(method, path, **upload)["digest"]
        yield world


Request = Callable[[World], tuple[str, str, dict[str, Any]]]


def fresh_bundle(world: World) -> dict[str, Any]:
    """Request arguments uploading a bundle no one uploaded before."""
    data = build_bundle([("train.py", f"# {next(world.counter)}\n".encode())])
    return {"content": data, "headers": {"Content-Type": "application/zip"}}


def fresh_input(world: World) -> tuple[str, str, dict[str, Any]]:
    """A request uploading an input file to alpha that no one uploaded before."""
    data = f'{{"text": "row {next(world.counter)}"}}\n'.encode()
    path = f"/v1/projects/alpha/inputs/sha256:{hashlib.sha256(data).hexdigest()}"
    return "PUT", path, {"content": data, "headers": {"Content-Type": "application/octet-stream"}}


def alpha_spec(world: World) -> dict[str, Any]:
    return small_spec(world.fresh_name("s"), 1) | {"project": "alpha"}


MATRIX: list[tuple[str, Request, dict[str, int]]] = [
    ("health", lambda w: ("GET", "/healthz", {}), dict.fromkeys(CALLERS, 200)),
    ("list jobs", lambda w: ("GET", "/v1/jobs", {}), everyone(200)),
    ("submit", lambda w: ("POST", "/v1/jobs", {"json": alpha_spec(w)}), roles(201)),
    ("plan", lambda w: ("POST", "/v1/jobs/plan", {"json": alpha_spec(w)}), roles(200)),
    ("get job", lambda w: ("GET", f"/v1/jobs/{w.job}", {}), reads_alpha()),
    ("events", lambda w: ("GET", f"/v1/jobs/{w.job}/events", {}), reads_alpha()),
    ("logs", lambda w: ("GET", f"/v1/jobs/{w.job}/logs", {}), reads_alpha()),
    ("metrics", lambda w: ("GET", f"/v1/jobs/{w.job}/metrics", {}), reads_alpha()),
    ("checkpoints", lambda w: ("GET", f"/v1/jobs/{w.job}/checkpoints", {}), reads_alpha()),
    # The job is no sweep: 422 to whoever may see it, hidden from the others.
    (
        "trials",
        lambda w: ("GET", f"/v1/jobs/{w.job}/trials", {}),
        roles(422, viewer=422, outsider=404),
    ),
    ("list trials", lambda w: ("GET", "/v1/jobs", {"params": {"parent": w.job}}), everyone(200)),
    # No attempt of the job has run, so there is no result to read yet.
    ("result", lambda w: ("GET", f"/v1/jobs/{w.job}/result", {}), everyone(404)),
    (
        "upload bundle",
        lambda w: ("POST", "/v1/projects/alpha/bundles", fresh_bundle(w)),
        roles(201, outsider=404),
    ),
    (
        "get bundle",
        lambda w: ("GET", f"/v1/projects/alpha/bundles/{w.bundle}", {}),
        reads_alpha(),
    ),
    ("upload input", fresh_input, roles(201)),
    (
        "get input",
        lambda w: ("GET", f"/v1/projects/alpha/inputs/{w.input}", {}),
        roles(200, viewer=200),
    ),
    (
        "compare",
        lambda w: ("GET", "/v1/jobs/compare", {"params": {"ids": f"{w.job},{w.other_job}"}}),
        reads_alpha(),
    ),
    (
        "cancel",
        lambda w: ("POST", f"/v1/jobs/{w.fresh_job()}/cancel", {}),
        roles(200, viewer=403, outsider=404),
    ),
    (
        "set secret",
        lambda w: (
            "PUT",
            f"/v1/projects/alpha/secrets/{w.fresh_name('k')}",
            {"json": {"value": "v"}},
        ),
        roles(201, member=403, outsider=404),
    ),
    # Members list the keys their specs name; viewers have no need of them.
    ("list secrets", lambda w: ("GET", "/v1/projects/alpha/secrets", {}), roles(200, outsider=404)),
    (
        "delete secret",
        lambda w: ("DELETE", f"/v1/projects/alpha/secrets/{_secret(w)}", {}),
        roles(204, member=403, outsider=404),
    ),
    # Only an attempt's own token reads its secrets: no API token, not even root's.
    (
        "attempt secrets",
        lambda w: ("GET", f"/v1/jobs/{w.job}/attempts/{'0' * 26}/secrets", {}),
        dict.fromkeys(CALLERS, 401),
    ),
    ("list clusters", lambda w: ("GET", "/v1/clusters", {}), everyone(200)),
    (
        "register cluster",
        lambda w: (
            "POST",
            "/v1/clusters",
            {"json": {"name": w.fresh_name("c"), "address": "http://127.0.0.1:9", "gpus": 1}},
        ),
        root_only(201),
    ),
    (
        "apply cluster",
        lambda w: (
            "PUT",
            f"/v1/clusters/{(name := w.fresh_name('a'))}",
            {"json": {"name": name, "address": "http://127.0.0.1:9", "gpus": 1}},
        ),
        root_only(201),
    ),
    (
        "remove cluster",
        lambda w: ("DELETE", f"/v1/clusters/{_cluster(w)}", {}),
        root_only(204),
    ),
    ("list projects", lambda w: ("GET", "/v1/projects", {}), everyone(200)),
    (
        "set storage root",
        lambda w: (
            "PATCH",
            "/v1/projects/alpha",
            {"json": {"storage": f"s3://team-bucket/{w.fresh_name('alpha')}"}},
        ),
        root_only(200),
    ),
    (
        "create project",
        lambda w: ("POST", "/v1/projects", {"json": {"name": w.fresh_name("p")}}),
        root_only(201),
    ),
    ("list tokens", lambda w: ("GET", "/v1/tokens", {}), everyone(200)),
    (
        "create token",
        lambda w: (
            "POST",
            "/v1/tokens",
            {"json": {"name": w.fresh_name("t"), "project": "alpha", "role": "viewer"}},
        ),
        roles(201, outsider=404, member=403),
    ),
    (
        "create global token",
        lambda w: ("POST", "/v1/tokens", {"json": {"name": w.fresh_name("g"), "role": "admin"}}),
        root_only(201),
    ),
    (
        "revoke token",
        lambda w: ("DELETE", f"/v1/tokens/{_victim(w)}", {}),
        roles(204, viewer=404, outsider=404, member=404),
    ),
    ("usage", lambda w: ("GET", "/v1/usage", {}), everyone(200)),
    ("models", lambda w: ("GET", "/v1/models", {}), everyone(200)),
    ("whoami", lambda w: ("GET", "/v1/whoami", {}), everyone(200)),
    ("audit", lambda w: ("GET", "/v1/audit", {}), everyone(200)),
    ("dashboard", lambda w: ("GET", "/", {}), everyone(200)),
    ("dashboard job", lambda w: ("GET", f"/jobs/{w.job}", {}), reads_alpha()),
    # Signing in and out is for anyone: the token posted is what gets checked.
    ("sign-in page", lambda w: ("GET", "/login", {}), dict.fromkeys(CALLERS, 200)),
    (
        "sign out",
        lambda w: ("POST", "/logout", {"follow_redirects": False}),
        dict.fromkeys(CALLERS, 303),
    ),
]


def _cluster(world: World) -> str:
    name = world.fresh_name("gone")
    world.root(
        "POST", "/v1/clusters", json={"name": name, "address": "http://127.0.0.1:9", "gpus": 1}
    )
    return name


def _secret(world: World) -> str:
    key = world.fresh_name("gone")
    world.root("PUT", f"/v1/projects/alpha/secrets/{key}", json={"value": "v"})
    return key


def _victim(world: World) -> str:
    return make_token(world, world.fresh_name("victim"), "alpha", "viewer")["id"]


def test_every_endpoint_answers_every_caller_as_the_table_says(world):
    wrong = []
    for (label, request, expected), caller in itertools.product(MATRIX, CALLERS):
        method, path, kwargs = request(world)
        headers = {**world.as_(caller), **kwargs.pop("headers", {})}
        got = world.client.request(method, path, headers=headers, **kwargs)
        if got.status_code != expected[caller]:
            wrong.append(f"{label} as {caller}: {got.status_code}, expected {expected[caller]}")
    assert not wrong, "\n".join(wrong)


def test_the_dashboard_cookie_reads_as_its_token_does(world):
    """The sign-in cookie stands for its token: every read answers the same.
    (Changes by cookie need the dashboard's header and origin as well.)"""
    wrong = []
    for (label, request, expected), caller in itertools.product(MATRIX, CALLERS):
        method, path, kwargs = request(world)
        if method != "GET" or path == "/login" or kwargs.get("headers"):
            continue
        cookie = {"Cookie": f"trainplane_token={world.tokens[caller]}"} if caller != "none" else {}
        world.client.cookies.clear()  # pages set the cookie again: keep none from before
        got = world.client.request(method, path, headers=cookie, **kwargs)
        if got.status_code != expected[caller]:
            wrong.append(f"{label} as {caller}: {got.status_code}, expected {expected[caller]}")
    assert not wrong, "\n".join(wrong)


def test_a_caller_sees_only_its_projects(world):
    listed = world.client.get("/v1/jobs", headers=world.as_("outsider")).json()["items"]
    assert listed == []
    mine = world.client.get("/v1/jobs", headers=world.as_("viewer")).json()["items"]
    assert {j["project"] for j in mine} == {"alpha"} and len(mine) == 2
    projects = world.client.get("/v1/projects", headers=world.as_("outsider")).json()["items"]
    assert [p["name"] for p in projects] == ["beta"]
    # A project admin lists its project's tokens, never a secret.
    tokens = world.client.get("/v1/tokens", headers=world.as_("admin")).json()["items"]
    assert {t["name"] for t in tokens} == {"viewer", "member", "admin", "expired", "revoked"}
    assert all("token" not in t for t in tokens)
    assert {t["name"]: t["status"] for t in tokens}["revoked"] == "revoked"
    assert world.client.get("/v1/tokens", headers=world.as_("viewer")).json()["items"] == []


def test_a_tokens_last_use_is_recorded_to_the_minute(world, session):
    def last_used():
        tokens = world.client.get("/v1/tokens", headers=world.as_("root")).json()["items"]
        return {t["name"]: t["last_used_at"] for t in tokens}

    assert last_used()["viewer"] is None
    world.client.get("/v1/jobs", headers=world.as_("viewer"))
    first = last_used()["viewer"]
    assert first is not None
    world.client.get("/v1/jobs", headers=world.as_("viewer"))
    assert last_used()["viewer"] == first  # within the minute: not written again
    with session.begin():
        session.execute(
            update(ApiToken)
            .where(ApiToken.name == "viewer")
            .values(last_used_at=utcnow() - timedelta(minutes=5))
        )
    world.client.get("/v1/jobs", headers=world.as_("viewer"))
    assert last_used()["viewer"] > first
    # A refused token is not "used".
    assert last_used()["revoked"] is None


def test_401s_say_why_and_ask_for_a_bearer_token(world):
    for caller, words in [
        ("none", "needs an API token"),
        ("expired", "expired"),
        ("revoked", "was revoked"),
    ]:
        response = world.client.get("/v1/jobs", headers=world.as_(caller))
        assert response.headers["www-authenticate"] == "Bearer"
        assert words in response.json()["detail"]
    bogus = world.client.get("/v1/jobs", headers={"Authorization": "Bearer tp_nope"})
    assert bogus.status_code == 401 and "not recognised" in bogus.json()["detail"]


def test_events_and_the_audit_trail_name_who_did_it(world):
    submitted = world.client.post(
        "/v1/jobs", json=alpha_spec(world), headers=world.as_("member")
    ).json()
    assert submitted["submitted_by"] == "member"
    cancelled = world.client.post(
        f"/v1/jobs/{submitted['id']}/cancel", headers=world.as_("admin")
    ).json()
    events = world.client.get(
        f"/v1/jobs/{submitted['id']}/events", headers=world.as_("viewer")
    ).json()["items"]
    assert [(e["to_status"], e["actor"]) for e in events] == [
        ("QUEUED", "member"),
        ("CANCELLED", "admin"),
    ]
    assert cancelled["reason"] == "cancelled by admin"
    trail = world.client.get("/v1/audit", headers=world.as_("root")).json()["items"]
    actions = [(e["actor"], e["action"], e["target"]) for e in trail]
    assert actions[0] == ("system", "token.create", "bootstrap")
    assert ("bootstrap", "project.create", "alpha") in actions
    assert ("bootstrap", "token.create", "viewer") in actions
    assert ("bootstrap", "token.revoke", "revoked") in actions
    assert ("bootstrap", "cluster.register", "shared") in actions
    # A project admin sees its project's part of the trail only.
    theirs = world.client.get("/v1/audit", headers=world.as_("admin")).json()["items"]
    assert theirs and all(e["project_id"] == trail[1]["project_id"] for e in theirs)
