"""Load test: many concurrent API clients against the real server on
PostgreSQL, with a one-client baseline measured in the same run.

Starts a throwaway PostgreSQL and ``trainplane server --workers 1`` (API and
scheduler, as in production) on 127.0.0.1 with a bootstrap token, fills it
with ``--history`` finished jobs (an attempt, 4 events and a kept log of
``LOG_LINES`` lines each) and gives every client a member token of its own.
Each client then loops, with no think time, over:

  - ``submit``: ``POST /v1/jobs``, a small valid spec, a fresh Idempotency-Key
  - ``resubmit``: in the 2nd loop and every 5th after it, the same key
    again, as a client retrying would: 200 and the same job
  - ``list``: ``GET /v1/jobs?limit=20`` (every 3rd time ``status=SUCCEEDED``),
    then half the time 1 to 3 ``list next page`` calls following ``next_cursor``
  - ``get`` and ``events`` of the job it submitted
  - every other loop ``follow logs (queued)``: the SSE stream of that job,
    timed to its first event (``status``: QUEUED), then held open for
    ``--follow-seconds`` and closed, as someone who gives up waiting would;
    otherwise ``follow logs (finished)``: the stream of a random finished
    job, timed to its ``end`` event, with every line of its log checked.

The server is registered to no Ray cluster, so submitted jobs stay QUEUED and
have no logs of their own; the finished jobs of the history are what makes
following logs carry a log. An error is any non-2xx answer, a transport error
or timeout, or an answer that is not what the operation documents (wrong id,
missing events). The process exits 1 if there was any.

The baseline is the same loop from one client for ``--baseline-seconds``,
before the load; the ratios compare each operation's p99 under load with it.
Client, server and PostgreSQL share the machine's cores; the CPU each used
during the load is printed so the numbers can be read for what they are.

    .venv/bin/python benchmarks/load.py [--clients 200] [--seconds 120]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import secrets
import ssl
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import insert

from trainplane.db import migrate
from trainplane.db.base import utcnow
from trainplane.db.engine import make_engine
from trainplane.db.models import Job, JobAttempt, JobEvent
from trainplane.ids import new_id
from trainplane.jobs.spec import parse_spec
from trainplane.services.jobs import spec_fingerprint
from trainplane.testing.postgres import ThrowawayPostgres
from trainplane.testing.server import ServerProcess

OPERATIONS = (
    "submit",
    "resubmit",
    "list",
    "list next page",
    "get",
    "events",
    "follow logs (queued)",
    "follow logs (finished)",
)
SPEC = {
    "kind": "train",
    "name": "load",
    "entrypoint": {"function": "train:train_loop", "args": {"epochs": 1}},
    "resources": {"gpus": 1},
    "strategy": {"type": "ddp"},
    "max_runtime": "1h",
}
DEFAULT_PROJECT_ID = "0" * 26  # the project every installation starts with
LOG_LINES = 100
HISTORY_BATCH = 2000
ENDED = {"SUCCEEDED": "SUCCEEDED", "FAILED": "FAILED", "CANCELLED": "STOPPED"}
# The file descriptors one client needs at most: its connection, and one more
# while a stream it abandoned is being torn down.
FDS_PER_CLIENT = 2


# --- the history: finished jobs whose logs can be followed --------------------------------


def history_log(job_number: int) -> str:
    return "\n".join(
        f"step {step:5d} loss {3.0 / (1 + step / 50):.4f} job {job_number}"
        for step in range(LOG_LINES)
    )


def history_rows(document: dict, number: int, created: datetime) -> tuple[dict, dict, list[dict]]:
    """The job, attempt and event rows of the ``number``-th finished job."""
    status = random.choices(list(ENDED), weights=(7, 2, 1))[0]
    job_id, began = new_id(), created + timedelta(minutes=1)
    ended = began + timedelta(minutes=random.randint(5, 120))
    job = {
        "id": job_id,
        "project_id": DEFAULT_PROJECT_ID,
        "name": f"history-{number % 50}",
        "kind": "train",
        "status": status,
        "reason": f"history {status.lower()}",
        "priority": 50,
        "gpus": 1,
        "strategy": "ddp",
        "spec": document,
        "spec_hash": spec_fingerprint(document),
        "submitted_by": "history",
        "created_at": created,
        "updated_at": ended,
        "started_at": began,
        "finished_at": ended,
    }
    # No cluster: it was removed since, so the log is the tail trainplane kept.
    attempt = {
        "id": new_id(),
        "job_id": job_id,
        "number": 1,
        "cluster_id": None,
        "status": ENDED[status],
        "created_at": began,
        "started_at": began,
        "finished_at": ended,
        "log_tail": history_log(number),
    }
    path = [(None, "QUEUED", created), ("QUEUED", "STARTING", began)]
    path += [("STARTING", "RUNNING", began), ("RUNNING", status, ended)]
    events = [
        {"job_id": job_id, "created_at": at, "from_status": before, "to_status": after}
        for before, after, at in path
    ]
    return job, attempt, events


def fill_history(url: str, count: int) -> list[str]:
    """``count`` finished jobs over the last 30 days; returns their ids."""
    document = parse_spec({**SPEC, "name": "history"}).model_dump(mode="json")
    start = utcnow() - timedelta(days=30)
    spacing = timedelta(days=30) / max(count, 1)
    engine = make_engine(url)
    ids = []
    with engine.begin() as conn:
        for offset in range(0, count, HISTORY_BATCH):
            jobs, attempts, events = [], [], []
            for number in range(offset, min(count, offset + HISTORY_BATCH)):
                job, attempt, job_events = history_rows(document, number, start + spacing * number)
                jobs.append(job)
                attempts.append(attempt)
                events.extend(job_events)
                ids.append(job["id"])
            conn.execute(insert(Job), jobs)
            conn.execute(insert(JobAttempt), attempts)
            conn.execute(insert(JobEvent), events)
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return ids


# --- what the clients record ----------------------------------------------------------------


class WrongAnswer(Exception):
    """An answer that is not what the operation promises."""

    kind = "wrong answer"


class UnexpectedStatus(WrongAnswer):
    def __init__(self, response: httpx.Response) -> None:
        try:
            body = response.text[:200]
        except httpx.ResponseNotRead:  # a stream: its body is not the point
            body = ""
        super().__init__(f"HTTP {response.status_code} {response.request.url}: {body}")
        self.kind = f"HTTP {response.status_code}"


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    examples: list[str] = field(default_factory=list)

    def record(self, operation: str, seconds: float) -> None:
        self.latencies[operation].append(seconds)

    def fail(self, operation: str, kind: str, detail: str) -> None:
        self.errors[operation][kind] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{operation}: {kind}: {detail[:300]}")

    def error_count(self) -> int:
        return sum(sum(kinds.values()) for kinds in self.errors.values())


def expect(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise UnexpectedStatus(response)


async def sse_events(response: httpx.Response) -> AsyncGenerator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream body, as they arrive."""
    name, data = None, []
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data.append(line.removeprefix("data: "))
        elif line == "" and name is not None:
            yield name, "\n".join(data)
            name, data = None, []


# --- one client -----------------------------------------------------------------------------


class LoadClient:
    """One user (or CI pipeline) with its own token and keep-alive connection."""

    def __init__(
        self, http: httpx.AsyncClient, tally: Tally, finished: list[str], follow_seconds: float
    ) -> None:
        self.http = http
        self.tally = tally
        self.finished = finished
        self.follow_seconds = follow_seconds

    async def timed(self, operation: str, call: Callable[[], Awaitable[float | None]]) -> None:
        """Runs one operation; ``call`` returns the seconds to record when
        they are not the whole call (a stream timed to one event)."""
        started = time.perf_counter()
        try:
            measured = await call()
        except WrongAnswer as exc:
            self.tally.fail(operation, exc.kind, str(exc))
        except Exception as exc:  # transport errors, timeouts, and bodies not as documented
            self.tally.fail(operation, type(exc).__name__, repr(exc))
        else:
            seconds = time.perf_counter() - started if measured is None else measured
            self.tally.record(operation, seconds)

    async def submit(self, key: str, created: int) -> str:
        response = await self.http.post("/v1/jobs", json=SPEC, headers={"Idempotency-Key": key})
        expect(response, created)
        return response.json()["id"]

    async def list_pages(self, filtered: bool, follow_pages: int) -> None:
        params: dict[str, str | int] = {"limit": 20}
        if filtered:
            params["status"] = "SUCCEEDED"
        response = await self.timed_get("list", "/v1/jobs", params)
        for _ in range(follow_pages):
            cursor = response.json()["next_cursor"] if response is not None else None
            if cursor is None:
                return
            response = await self.timed_get(
                "list next page", "/v1/jobs", {**params, "cursor": cursor}
            )

    async def timed_get(self, operation: str, path: str, params: dict) -> httpx.Response | None:
        answer: list[httpx.Response] = []

        async def call() -> None:
            response = await self.http.get(path, params=params)
            expect(response, 200)
            if not isinstance(response.json().get("items"), list):
                raise WrongAnswer("no items")
            answer.append(response)

        await self.timed(operation, call)
        return answer[0] if answer else None

    async def get_job(self, job_id: str) -> None:
        response = await self.http.get(f"/v1/jobs/{job_id}")
        expect(response, 200)
        job = response.json()
        if job["id"] != job_id or job["status"] != "QUEUED":
            raise WrongAnswer(f"asked for queued {job_id}, got {job['id']} {job['status']}")

    async def read_events(self, job_id: str) -> None:
        response = await self.http.get(f"/v1/jobs/{job_id}/events")
        expect(response, 200)
        items = response.json()["items"]
        if not items or items[0]["to_status"] != "QUEUED":
            raise WrongAnswer(f"events of {job_id} do not start with QUEUED: {items[:1]}")

    async def follow_queued(self, job_id: str) -> float:
        """Seconds to the first event; the stream is then held, then dropped."""
        started = time.perf_counter()
        url = f"/v1/jobs/{job_id}/logs"
        async with self.http.stream("GET", url, params={"follow": "true"}) as response:
            expect(response, 200)
            events = sse_events(response)
            try:
                name, data = await anext(events, (None, ""))
                first = time.perf_counter() - started
                if name != "status" or json.loads(data)["status"] != "QUEUED":
                    raise WrongAnswer(f"first event of a queued job: {name} {data[:100]}")
                try:
                    async with asyncio.timeout(self.follow_seconds):
                        async for name, _ in events:
                            if name != "status":  # keep-alives are comments, not events
                                raise WrongAnswer(f"a queued job streamed {name}")
                except TimeoutError:
                    pass  # the reader leaves: the expected end of this operation
            finally:
                await events.aclose()
        return first

    async def follow_finished(self) -> None:
        job_id = random.choice(self.finished)
        url = f"/v1/jobs/{job_id}/logs"
        seen: dict[str, str] = {}
        async with self.http.stream("GET", url, params={"follow": "true"}) as response:
            expect(response, 200)
            async for name, data in sse_events(response):
                seen[name] = data
        if list(seen) != ["status", "attempt", "log", "end"]:
            raise WrongAnswer(f"stream of finished {job_id}: events {list(seen)}")
        if len(seen["log"].split("\n")) != LOG_LINES:
            raise WrongAnswer(f"log of {job_id}: {len(seen['log'].splitlines())} lines")

    async def run(self, deadline: float) -> None:
        loop = 0
        while time.perf_counter() < deadline:
            loop += 1
            key = uuid.uuid4().hex
            submitted: list[str] = []

            async def submit(key: str = key, submitted: list[str] = submitted) -> None:
                submitted.append(await self.submit(key, 201))

            await self.timed("submit", submit)
            if not submitted:
                await asyncio.sleep(0.1)  # bounded retries of a failing server
                continue
            job_id = submitted[0]
            steps = self.steps(loop, key, job_id)
            for step in steps:
                if time.perf_counter() >= deadline:
                    return
                await step()

    def steps(self, loop: int, key: str, job_id: str) -> list[Callable[[], Awaitable[None]]]:
        async def resubmit() -> None:
            if await self.submit(key, 200) != job_id:
                raise WrongAnswer(f"the same Idempotency-Key gave another job than {job_id}")

        def follow() -> Awaitable[None]:
            if loop % 2:
                return self.timed("follow logs (queued)", lambda: self.follow_queued(job_id))
            return self.timed("follow logs (finished)", self.follow_finished)

        pages = random.choice((0, 0, 0, 1, 2, 3))
        steps = [
            lambda: self.list_pages(filtered=loop % 3 == 0, follow_pages=pages),
            lambda: self.timed("get", lambda: self.get_job(job_id)),
            lambda: self.timed("events", lambda: self.read_events(job_id)),
            follow,
        ]
        if loop % 5 == 2:  # from the 2nd loop on, so short runs have some too
            steps.insert(0, lambda: self.timed("resubmit", resubmit))
        return steps


# --- phases ---------------------------------------------------------------------------------


@dataclass
class Setup:
    url: str
    tokens: list[str]
    finished: list[str]
    follow_seconds: float
    timeout: float


# Plain HTTP needs no TLS, but each httpx client builds a TLS context unless
# given one: ~40 ms of CPU apiece, which for hundreds of clients would stall
# the load generator's loop while other clients' requests are being timed.
UNUSED_TLS = ssl.create_default_context()


def http_client(setup: Setup, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=setup.url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=setup.timeout,
        limits=httpx.Limits(max_connections=FDS_PER_CLIENT, max_keepalive_connections=1),
        verify=UNUSED_TLS,
        trust_env=False,  # no proxy from the environment: 127.0.0.1 only
    )


async def run_phase(setup: Setup, clients: int, seconds: float) -> tuple[Tally, float]:
    """``clients`` clients for ``seconds``, their starts spread over the first
    tenth (at most 5 s) so connections open as people arrive, not at one
    instant. Returns the tally and the wall time until the last client ended."""
    tally = Tally()
    ramp = min(5.0, seconds / 10)
    async with contextlib.AsyncExitStack() as stack:
        connections = [
            await stack.enter_async_context(http_client(setup, setup.tokens[n]))
            for n in range(clients)
        ]
        started = time.perf_counter()
        deadline = started + seconds

        async def one(number: int) -> None:
            await asyncio.sleep(ramp * number / clients)
            client = LoadClient(connections[number], tally, setup.finished, setup.follow_seconds)
            await client.run(deadline)

        await asyncio.gather(*(one(n) for n in range(clients)))
        return tally, time.perf_counter() - started


def member_tokens(url: str, admin_token: str, count: int) -> list[str]:
    """One member token of the default project per client, made with the admin one."""
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, trust_env=False
    ) as http:
        made = []
        for n in range(count):
            body = {"name": f"load-{n}", "project": "default", "role": "member"}
            response = http.post("/v1/tokens", json=body)
            response.raise_for_status()
            made.append(response.json()["token"])
        return made


# --- CPU used, by whom ----------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def process_ticks(pid: int) -> tuple[int, int]:
    """(parent pid, CPU ticks of the process and its reaped children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(v) for v in fields[11:15])


def tree_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its living children (PostgreSQL's backends)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent, ticks = process_ticks(int(entry.name))
        except (OSError, IndexError):
            continue  # it ended while we looked
        if int(entry.name) == root or parent == root:
            total += ticks
    return total / TICKS


def machine_seconds() -> float:
    """Busy CPU seconds of the whole machine, every core."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / TICKS


@dataclass
class CpuMeter:
    server_pid: int
    postgres_pid: int

    def read(self) -> dict[str, float]:
        own = os.times()
        return {
            "client": own.user + own.system,
            "server": tree_seconds(self.server_pid),
            "postgres": tree_seconds(self.postgres_pid),
            "machine": machine_seconds(),
        }


# --- the server's own view -----------------------------------------------------------------

SERVER_TIMER = re.compile(
    r'^trainplane_http_request_duration_seconds_(sum|count)\{method="(\w+)",route="([^"]+)"'
    r',status="\d+"\} (\S+)$'
)


def server_timings(url: str) -> dict[str, list[float]]:
    """[requests, seconds] by ``METHOD route`` from the server's /metrics:
    from the app getting a request to its first byte back, so without the
    waits in the kernel, the HTTP parser and the client."""
    with httpx.Client(trust_env=False) as http:
        text = http.get(f"{url}/metrics").text
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for line in text.splitlines():
        if found := SERVER_TIMER.match(line):
            kind, method, route, value = found.groups()
            totals[f"{method} {route}"][kind == "sum"] += float(value)
    return totals


def print_server_view(before: dict[str, list[float]], after: dict[str, list[float]]) -> None:
    print("\nThe server's own time per request during the load (/metrics, mean):\n")
    print("| route | requests | server mean ms |")
    print("|---|---:|---:|")
    for route, (count, seconds) in sorted(after.items()):
        count -= before.get(route, [0.0, 0.0])[0]
        seconds -= before.get(route, [0.0, 0.0])[1]
        if count > 0 and route.split()[1].startswith("/v1/jobs"):
            print(f"| {route} | {count:.0f} | {1000 * seconds / count:.1f} |")


# --- report ---------------------------------------------------------------------------------


def percentile(ordered: list[float], q: float) -> float:
    """A sample at rank ``q`` (rounded down), never one interpolated between
    two: the same rule for every quantile, however few samples."""
    return ordered[int(q * (len(ordered) - 1))] if ordered else float("nan")


def summarize(tally: Tally, wall: float) -> dict[str, dict]:
    rows = {}
    for operation in OPERATIONS:
        ordered = sorted(tally.latencies.get(operation, []))
        rows[operation] = {
            "count": len(ordered),
            "errors": sum(tally.errors.get(operation, Counter()).values()),
            "per_second": len(ordered) / wall,
            "p50_ms": 1000 * percentile(ordered, 0.50),
            "p95_ms": 1000 * percentile(ordered, 0.95),
            "p99_ms": 1000 * percentile(ordered, 0.99),
            "max_ms": 1000 * ordered[-1] if ordered else float("nan"),
        }
    return rows


def print_table(title: str, rows: dict[str, dict], wall: float) -> None:
    total = sum(r["count"] for r in rows.values())
    print(f"\n{title}: {total} operations in {wall:.1f} s = {total / wall:.0f} operations/s\n")
    print("| operation | count | errors | /s | p50 ms | p95 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['count']} | {r['errors']} | {r['per_second']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} |"
        )


def print_ratios(load: dict[str, dict], baseline: dict[str, dict]) -> None:
    print("\np99 and p50 under load against the one-client baseline:\n")
    print("| operation | baseline p99 ms | load p99 ms | p99 ratio | p50 ratio |")
    print("|---|---:|---:|---:|---:|")
    for name in OPERATIONS:
        base, under = baseline[name], load[name]
        p99_ratio = under["p99_ms"] / base["p99_ms"] if base["count"] else float("nan")
        p50_ratio = under["p50_ms"] / base["p50_ms"] if base["count"] else float("nan")
        print(
            f"| {name} | {base['p99_ms']:.1f} | {under['p99_ms']:.1f} | "
            f"{p99_ratio:.1f}x | {p50_ratio:.1f}x |"
        )


def print_cpu(before: dict[str, float], after: dict[str, float], wall: float) -> None:
    used = {k: after[k] - before[k] for k in before}
    ours = used["client"] + used["server"] + used["postgres"]
    cores = os.cpu_count() or 1
    idle = max(0.0, cores * wall - used["machine"])
    print(
        f"\nCPU during the load ({cores} cores x {wall:.0f} s = {cores * wall:.0f} core-s): "
        f"client {used['client']:.0f}, server {used['server']:.0f}, "
        f"PostgreSQL {used['postgres']:.0f}, other processes "
        f"{max(0.0, used['machine'] - ours):.0f}, idle {idle:.0f}"
    )


def print_errors(tally: Tally, log_path: Path) -> None:
    for operation, kinds in tally.errors.items():
        print(f"errors of {operation}: {dict(kinds)}", file=sys.stderr)
    for example in tally.examples:
        print(f"  {example}", file=sys.stderr)
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    if lines:
        print("server log (last 40 lines):", *lines[-40:], sep="\n", file=sys.stderr)


# --- main -----------------------------------------------------------------------------------


def raise_fd_limit(clients: int) -> None:
    """Room for every client's sockets here and in the server (it inherits
    the limit), plus PostgreSQL connections and files: the default soft limit
    of 1024 is too few for a few hundred clients."""
    needed = 2 * FDS_PER_CLIENT * clients + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        ceiling = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    if soft < needed:
        sys.exit(f"RLIMIT_NOFILE allows {soft} open files; {clients} clients need {needed}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=120.0, help="duration of the load")
    parser.add_argument("--baseline-seconds", type=float, default=30.0, help="one client, first")
    parser.add_argument("--history", type=int, default=10_000, help="finished jobs beforehand")
    parser.add_argument(
        "--follow-seconds", type=float, default=1.0, help="how long a queued job's log is followed"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="per request, in seconds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    raise_fd_limit(args.clients)
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as home:
        url = pg.create_database("load")
        migrate.upgrade(url)
        started = time.perf_counter()
        finished = fill_history(url, args.history)
        print(f"filled {args.history} finished jobs in {time.perf_counter() - started:.1f}s")
        admin_token = "tp_" + secrets.token_urlsafe(24)
        env = {
            "TRAINPLANE_DATABASE_URL": url,
            "TRAINPLANE_HOME": home,
            "TRAINPLANE_BOOTSTRAP_TOKEN": admin_token,
        }
        log_path = Path(home) / "server.log"
        with ServerProcess(env, workers=1, log_path=log_path) as server:
            tokens = member_tokens(server.url, admin_token, max(args.clients, 1))
            setup = Setup(server.url, tokens, finished, args.follow_seconds, args.timeout)
            postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
            meter = CpuMeter(server.process.pid, postmaster)  # type: ignore[union-attr]
            results = asyncio.run(measure(setup, args, meter))
            tally = results["tally"]
            if tally.error_count():
                print_errors(tally, log_path)
    if args.json:
        clean = {k: v for k, v in results.items() if k != "tally"}
        args.json.write_text(json.dumps(clean, indent=2))
    errors = results["tally"].error_count()
    print(f"\nerrors: {errors}")
    return 1 if errors else 0


async def measure(setup: Setup, args: argparse.Namespace, meter: CpuMeter) -> dict:
    # Warm the server's code paths and caches; not counted.
    await run_phase(setup, min(args.clients, 10), 3.0)
    baseline_tally, baseline_wall = await run_phase(setup, 1, args.baseline_seconds)
    baseline = summarize(baseline_tally, baseline_wall)
    print_table("baseline, 1 client", baseline, baseline_wall)
    timings_before, cpu_before = server_timings(setup.url), meter.read()
    tally, wall = await run_phase(setup, args.clients, args.seconds)
    cpu_after, timings_after = meter.read(), server_timings(setup.url)
    load = summarize(tally, wall)
    print_table(f"load, {args.clients} clients", load, wall)
    print_ratios(load, baseline)
    print_server_view(timings_before, timings_after)
    print_cpu(cpu_before, cpu_after, wall)
    print(
        "\nThe server is registered to no Ray cluster: every submitted job stays QUEUED "
        "(checked by get), and followed logs of finished jobs are their kept tails."
    )
    # Baseline errors count as much as load errors.
    tally.errors.update({f"baseline {k}": v for k, v in baseline_tally.errors.items()})
    tally.examples.extend(baseline_tally.examples)
    return {"baseline": baseline, "load": load, "tally": tally, "seconds": wall}


if __name__ == "__main__":
    sys.exit(main())
