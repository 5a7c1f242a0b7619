"""runtime.start_events: milestones are written only when a job asks for them."""

from __future__ import annotations

import json

from trainplane.jobs.environment import check_env_name
from trainplane.runtime.start_events import START_EVENTS_FILE, mark, mark_process_start


def test_marks_go_to_the_file_the_job_names_and_nowhere_otherwise(tmp_path, monkeypatch):
    target = tmp_path / "events.jsonl"
    monkeypatch.delenv(START_EVENTS_FILE, raising=False)
    mark("ignored")
    assert not target.exists()

    # A job may set it in entrypoint.env, like the metrics file.
    assert check_env_name(START_EVENTS_FILE) == START_EVENTS_FILE
    monkeypatch.setenv(START_EVENTS_FILE, str(target))
    mark_process_start("process started")
    mark("imported")
    mark("at a given time", at=12.5)
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["process started", "imported", "at a given time"]
    assert lines[0]["time"] <= lines[1]["time"]  # a process is created before it imports
    assert lines[2]["time"] == 12.5


def test_an_unwritable_file_never_fails_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv(START_EVENTS_FILE, str(tmp_path / "missing" / "events.jsonl"))
    mark("still fine")
