"""Specs posted as YAML to ``/v1/jobs`` and ``/v1/jobs/plan``."""

from __future__ import annotations

import pytest

from tests.factories import count_rows

YAML = {"content-type": "application/yaml"}
SPEC = """\
kind: train
name: from-yaml
project: default
entrypoint:
  command: [python, -c, "print(1)"]
resources: {gpus: 1}
tracking: {tags: {day: 2026-12-01}}
"""


def test_a_yaml_spec_is_submitted_like_json(api):
    created = api.post("/v1/jobs", content=SPEC, headers=YAML)
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["name"] == "from-yaml" and job["spec"]["resources"]["gpus"] == 1
    # A date YAML reads as one is kept as the text it was.
    assert job["spec"]["tracking"]["tags"] == {"day": "2026-12-01"}
    planned = api.post("/v1/jobs/plan", content=SPEC, headers={"content-type": "text/yaml"})
    assert planned.status_code == 200 and planned.json()["valid"] is True


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (SPEC.replace("{gpus: 1}", "{gpus: 0}"), "resources.gpus", "must be at least 1"),
        (SPEC + "colour: red\n", "colour", "unknown field"),
        ("kind: [train\n", "body", "line 2"),
        ("a: &x [1, 2]\nb: *x\n", "body", "aliases"),
    ],
)
def test_bad_yaml_is_422_naming_the_field_and_creates_nothing(api, session, text, field, words):
    response = api.post("/v1/jobs", content=text, headers=YAML)
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == field and words in error["message"]
    assert count_rows(session) == (0, 0)


def test_json_bodies_are_untouched_by_the_yaml_reader(api):
    created = api.post(
        "/v1/jobs", content=b'{"kind": "train"', headers={"content-type": "application/json"}
    )
    assert created.status_code == 422 and created.json()["errors"][0]["field"] == "body"
