"""A tiny training run for the CLI's CI tests: it reports STEPS steps of a
falling loss (and a final eval_loss of EVAL_LOSS) to the control plane the way
the runtime does, over HTTP with the attempt's token, then exits with
EXIT_CODE. STEP_SLEEP seconds between steps."""

import json
import os
import sys
import time
import urllib.request

env = os.environ
steps = int(env.get("STEPS", "6"))
sleep = float(env.get("STEP_SLEEP", "0.5"))
url = f"{env['TRAINPLANE_URL']}/v1/jobs/{env['TRAINPLANE_JOB_ID']}"
url += f"/attempts/{env['TRAINPLANE_ATTEMPT_ID']}/progress"
headers = {
    "Authorization": "Bearer " + env["TRAINPLANE_ATTEMPT_TOKEN"],
    "Content-Type": "application/json",
}


def report(step: int, metrics: dict) -> None:
    point = {"step": step, "time": time.time(), "metrics": metrics}
    body = json.dumps({"step": step, "total_steps": steps, "points": [point]}).encode()
    request = urllib.request.Request(url, data=body, headers=headers)
    urllib.request.urlopen(request, timeout=10).close()


for step in range(1, steps + 1):
    time.sleep(sleep)
    metrics = {"loss": round(2.0 / step, 4)}
    if step == steps and "EVAL_LOSS" in env:
        metrics["eval_loss"] = float(env["EVAL_LOSS"])
    report(step, metrics)
    print(f"step {step} {metrics}", flush=True)
sys.exit(int(env.get("EXIT_CODE", "0")))
