// trainplane dashboard: keeps server-rendered pages live and talks to the public
// API (/v1/...) as the signed-in browser. No dependencies.
"use strict";

(() => {
  const METRICS_PAGE = 1000;
  const CHART_POLL_MS = 2000;
  // Sent with every change: the API takes the sign-in cookie for one only with it.
  const DASHBOARD_HEADER = "X-Trainplane-Dashboard";
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  // --- signing in --------------------------------------------------------------------------
  // The token lives in an HttpOnly cookie that /login sets: no script here can read it,
  // and the browser sends it to this server only. Earlier versions kept it in
  // localStorage: forget that copy.
  localStorage.removeItem("trainplane.token");

  function askForToken() {
    const dialog = $("#token-dialog");
    if (dialog && !dialog.open) dialog.showModal();
  }

  // fetch against the API; resolves to {ok, status, body}. A 401 asks for a token.
  async function api(method, path, { body, contentType = "application/json", extraHeaders = {} } = {}) {
    const headers = { Accept: "application/json", ...extraHeaders };
    if (method !== "GET" && method !== "HEAD") headers[DASHBOARD_HEADER] = "1";
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers["Content-Type"] = contentType;
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      return { ok: false, status: 0, body: { detail: `the server did not answer (${error.message})` } };
    }
    if (response.status === 401) askForToken();
    const text = await response.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = { detail: text };
    }
    return { ok: response.ok, status: response.status, body: parsed };
  }

  function wireTokenDialog() {
    const dialog = $("#token-dialog");
    if (!dialog) return;
    // Signing in and out are plain form posts; only opening and closing need a script.
    $('[data-action="close-dialog"]', dialog).addEventListener("click", () => dialog.close());
    $$('[data-action="token"]').forEach((b) => b.addEventListener("click", askForToken));
  }

  // --- live fragments ------------------------------------------------------------------------
  // An element with data-live="<fragment url>" has the page re-read that URL every
  // data-live-every ms while the tab is visible. The fragment holds [data-part]
  // elements; each replaces the page's element with the same data-part. With
  // data-live-until-terminal it stops once the job ended, and reloads once so the
  // whole page settles (no cancel button, final charts).
  const ended = () => Boolean($('[data-part][data-terminal="true"]'));

  function swapParts(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    let changed = false;
    for (const fresh of template.content.querySelectorAll("[data-part]")) {
      const current = $(`[data-part="${fresh.dataset.part}"]`);
      if (!current || current.outerHTML === fresh.outerHTML) continue;
      const picked = new Set($$('input[name="pick"]:checked', current).map((i) => i.value));
      $$('input[name="pick"]', fresh).forEach((i) => (i.checked = picked.has(i.value)));
      current.replaceWith(fresh);
      fresh.dispatchEvent(new CustomEvent("live-updated", { bubbles: true }));
      changed = true;
    }
    return changed;
  }

  function wireLiveFragments() {
    for (const region of $$("[data-live]")) {
      const every = Number(region.dataset.liveEvery || 3000);
      const untilTerminal = region.hasAttribute("data-live-until-terminal");
      let last = null;
      const schedule = () => setTimeout(tick, every);
      async function tick() {
        if (document.hidden) return schedule();
        let response;
        try {
          response = await fetch(region.dataset.live, { credentials: "same-origin" });
        } catch {
          return schedule();
        }
        if (response.ok) {
          const html = await response.text();
          if (html !== last) {
            last = html;
            swapParts(html);
          }
          if (untilTerminal && ended()) {
            location.reload();
            return;
          }
        }
        schedule();
      }
      schedule();
    }
  }

  // --- jobs list: pick jobs to compare -------------------------------------------------------
  function wireCompareSelection() {
    for (const form of $$('[data-form="compare-selected"], [data-form="compare-picker"]')) {
      const button = $('button[type="submit"]', form);
      const update = () => {
        const picked = $$('input[name="pick"]:checked', form).map((i) => i.value);
        form.elements.ids.value = picked.join(",");
        if (form.dataset.form === "compare-selected") button.disabled = picked.length < 2;
      };
      form.addEventListener("change", update);
      form.addEventListener("live-updated", update);
      form.addEventListener("submit", (event) => {
        update();
        // Only ids travel: the checkboxes would add pick=... to the address.
        event.preventDefault();
        location.href = `/compare?ids=${encodeURIComponent(form.elements.ids.value)}`;
      });
      update();
    }
  }

  // --- job page: cancel ----------------------------------------------------------------------
  function say(text, tone = "info") {
    const box = $("[data-message]");
    if (!box) return;
    box.textContent = text;
    box.dataset.tone = tone;
  }

  function wireCancel() {
    const button = $('[data-action="cancel"]');
    const dialog = $("#cancel-dialog");
    if (!button || !dialog) return;
    button.addEventListener("click", () => dialog.showModal());
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "confirm") return;
      button.disabled = true;
      const result = await api("POST", `/v1/jobs/${button.dataset.jobId}/cancel`);
      if (result.ok) {
        say(`Cancel requested: ${result.body.reason}`);
      } else {
        button.disabled = false;
        const why = result.status === 403 ? "your token may not cancel this job" : result.body?.detail;
        say(`Could not cancel (${result.status}): ${why}`, "bad");
      }
    });
  }

  // --- job page: logs ------------------------------------------------------------------------
  // The stream is read with fetch and split into server-sent events here (it
  // started that way to send a bearer header; the cookie now does).
  async function followLogs(pre) {
    const state = $("[data-logs-state]");
    const tail = $("[data-follow-tail]");
    const append = (text) => {
      pre.append(document.createTextNode(text));
      if (!tail || tail.checked) pre.scrollTop = pre.scrollHeight;
    };
    const handle = (event, data) => {
      if (event === "log") append(data);
      else if (event === "attempt") {
        const info = JSON.parse(data);
        append(`\n── attempt ${info.number}${info.cluster ? ` on ${info.cluster}` : ""} ──\n`);
      } else if (event === "status") {
        const info = JSON.parse(data);
        state.textContent = `${info.status}: ${info.reason}`;
      } else if (event === "end") {
        const info = JSON.parse(data);
        state.textContent = `Ended ${info.status}: ${info.reason}`;
        pre.dataset.ended = "true";
      } else if (event === "error") {
        // The token was revoked or expired while the log was open.
        const info = JSON.parse(data);
        state.textContent = `Stopped following: ${info.detail}`;
        if (info.status === 401) askForToken();
      }
    };
    let response;
    try {
      response = await fetch(pre.dataset.logs, {
        headers: { Accept: "text/event-stream" },
        credentials: "same-origin",
      });
    } catch (error) {
      state.textContent = `Logs unavailable: ${error.message}`;
      return;
    }
    if (!response.ok) {
      state.textContent = `Logs unavailable (${response.status})`;
      if (response.status === 401) askForToken();
      return;
    }
    pre.dataset.following = "true";
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data.push(line.slice(6));
          else if (line === "data:") data.push("");
        }
        if (data.length) handle(event, data.join("\n"));
      }
    }
    pre.dataset.following = "false";
  }

  // --- charts ------------------------------------------------------------------------------
  // Every metric point of a job, fetched page by page and then incrementally.
  class MetricStream {
    constructor(jobId) {
      this.jobId = jobId;
      this.points = [];
      this.cursor = null;
      this.progress = null;
    }
    async more() {
      for (;;) {
        const query = new URLSearchParams({ limit: METRICS_PAGE });
        if (this.cursor) query.set("cursor", this.cursor);
        const result = await api("GET", `/v1/jobs/${this.jobId}/metrics?${query}`);
        if (!result.ok) return false;
        const page = result.body;
        this.progress = page.progress;
        this.points.push(...page.points);
        if (page.points.length) this.cursor = String(page.points[page.points.length - 1].id);
        if (!page.next_cursor) return true;
      }
    }
    // [step, value] of `metric` (or `fallback` when the job never reported it).
    series(metric, fallback) {
      const pick = (name) =>
        this.points.filter((p) => p.metrics[name] !== undefined).map((p) => [p.step, p.metrics[name]]);
      const values = pick(metric);
      if (values.length || !fallback) return { name: metric, points: sortByStep(values) };
      return { name: fallback, points: sortByStep(pick(fallback)) };
    }
  }

  function sortByStep(points) {
    // A restarted attempt reports steps again from its checkpoint: the later
    // report of a step wins, so the curve is the one the job finally took.
    const byStep = new Map();
    for (const p of points) byStep.set(p[0], p);
    return Array.from(byStep.values()).sort((a, b) => a[0] - b[0]);
  }

  function wireJobCharts() {
    const figures = $$('[data-chart="metrics"]');
    if (!figures.length) return;
    const stream = new MetricStream(figures[0].dataset.jobId);
    const live = figures[0].dataset.liveCharts === "true";
    const draw = () => {
      for (const figure of figures) {
        const series = stream.series(figure.dataset.metric, figure.dataset.fallback);
        const body = $(".chart-body", figure);
        if (series.points.length) {
          window.TrainplaneCharts.lineChart(body, { series: [series], yLabel: series.name });
          $("figcaption", figure).dataset.count = series.points.length;
        }
      }
    };
    const tick = async () => {
      if (!document.hidden) {
        const before = stream.points.length;
        await stream.more();
        if (stream.points.length !== before || !before) draw();
      }
      if (live && !ended()) setTimeout(tick, CHART_POLL_MS);
    };
    tick();
    window.addEventListener("resize", draw);
  }

  async function wireCompareChart() {
    const figure = $('[data-chart="overlay"]');
    if (!figure) return;
    const ids = JSON.parse(figure.dataset.jobs);
    const names = JSON.parse(figure.dataset.names);
    const streams = ids.map((id) => new MetricStream(id));
    await Promise.all(streams.map((s) => s.more()));
    const draw = () => {
      const series = streams.map((s, i) => {
        const one = s.series(figure.dataset.metric, figure.dataset.fallback);
        return { name: `${names[i]} (${one.name})`, points: one.points };
      });
      const body = $(".chart-body", figure);
      if (!window.TrainplaneCharts.lineChart(body, { series, yLabel: figure.dataset.metric })) {
        body.innerHTML = '<p class="empty">None of these jobs reported a loss.</p>';
      }
    };
    draw();
    window.addEventListener("resize", draw);
  }

  function wireUsageChart() {
    const figure = $('[data-chart="stacked-bars"]');
    if (!figure) return;
    const days = JSON.parse($("[data-chart-data]", figure).textContent);
    const projects = Array.from(new Set(days.flatMap((d) => Object.keys(d.gpu_hours)))).sort();
    const draw = () =>
      window.TrainplaneCharts.stackedBars($(".chart-body", figure), {
        categories: days.map((d) => d.day.slice(5)),
        series: projects.map((p) => ({ name: p, values: days.map((d) => d.gpu_hours[p] || 0) })),
        yLabel: "GPU-hours",
      });
    draw();
    window.addEventListener("resize", draw);
  }

  // --- sweep page: the trial table sorts by any column; a chart per parameter -------------
  // Cells carry data-value (numbers as numbers, "" for none: always last).
  function sortRows(table, column, ascending) {
    const header = $$("thead th", table)[column];
    const numeric = header.dataset.sortType === "number";
    const body = $("tbody", table);
    const rows = $$("tr[data-trial-id]", body);
    const key = (row) => row.children[column]?.dataset.value ?? "";
    rows.sort((a, b) => {
      const ka = key(a);
      const kb = key(b);
      if (ka === "" || kb === "") return (ka === "") - (kb === "");
      const order = numeric ? Number(ka) - Number(kb) : ka.localeCompare(kb, undefined, { numeric: true });
      return ascending ? order : -order;
    });
    body.append(...rows);
    $$("thead th", table).forEach((th) => th.removeAttribute("aria-sort"));
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function wireSweep() {
    const table = $('[data-table="trials"]');
    if (!table) return;
    let sorted = null; // [column, ascending], kept across live updates
    $$("thead th", table).forEach((th, column) => {
      const button = $("[data-sort]", th);
      if (!button) return;
      button.addEventListener("click", () => {
        const ascending = sorted && sorted[0] === column ? !sorted[1] : true;
        sorted = [column, ascending];
        sortRows(table, column, ascending);
      });
    });
    const figures = $$('[data-chart="sweep"]');
    const draw = () => {
      const data = JSON.parse($("[data-sweep-chart]").textContent);
      const label = `${data.metric} (last)`;
      for (const figure of figures) {
        const path = figure.dataset.parameter;
        const points = data.trials
          .filter((t) => t.value !== null && t.parameters[path] !== undefined)
          .map((t) => ({ x: t.parameters[path], y: t.value, label: t.name, href: `/jobs/${t.id}`, best: t.best, status: t.status }));
        const body = $(".chart-body", figure);
        if (window.TrainplaneCharts.scatterChart(body, { points, xLabel: path, yLabel: label, scale: figure.dataset.scale })) {
          $("figcaption", figure).dataset.count = points.length;
        }
      }
    };
    document.addEventListener("live-updated", (event) => {
      const part = event.target.dataset?.part;
      if (part === "sweep-rows" && sorted) sortRows(table, ...sorted);
      if (part === "sweep-data") draw();
    });
    draw();
    window.addEventListener("resize", draw);
  }

  // --- submit ------------------------------------------------------------------------------
  // The line of a dotted field path (resources.gpus) in YAML text, by indentation;
  // null when it is not written there (a missing field, or flow style).
  function lineOf(text, field) {
    const parts = field.split(".").filter((p) => !/^\d+$/.test(p));
    const lines = text.split("\n");
    let depth = -1;
    let at = 0;
    let found = null;
    for (const part of parts) {
      found = null;
      for (let i = at; i < lines.length; i++) {
        const match = /^(\s*)([A-Za-z0-9_."'-]+)\s*:/.exec(lines[i]);
        if (!match) continue;
        const indent = match[1].length;
        if (indent <= depth) break;
        if (match[2].replace(/["']/g, "") === part) {
          found = i;
          depth = indent;
          at = i + 1;
          break;
        }
      }
      if (found === null) return null;
    }
    return found === null ? null : found + 1;
  }

  // The plan's answer in a few lines: placement, strategy, memory, start, cost.
  function planLines(body) {
    const where = body.placement;
    const lines = [
      `Valid. ${where.can_start_now ? `Would start now on ${where.cluster}.` : `Would wait: ${where.reason}`} Queue position ${where.queue_position}.`,
    ];
    const strategy = body.strategy;
    if (strategy) {
      const picked = strategy.requested === "auto" ? `auto → ${strategy.chosen}` : strategy.chosen;
      lines.push(`Strategy: ${picked}. ${strategy.reason}`);
    }
    const memory = body.memory;
    if (memory) {
      const of = memory.gpu_memory_gb ? ` of ${memory.gpu_memory_gb} GB (${Math.round(memory.fraction * 100)}%)` : "";
      lines.push(`Memory per GPU: ${memory.total_gb.toFixed(1)} GB${of}.`);
    }
    if (!where.can_start_now && where.expected_start_basis) {
      const seconds = where.expected_start_in_seconds;
      lines.push(seconds == null ? `Expected start: ${where.expected_start_basis}.` : `Expected start: in about ${Math.max(1, Math.round(seconds / 60))} min.`);
    }
    const cost = body.cost;
    if (cost) {
      lines.push(cost.expected_cost == null ? `Cost: unknown (${cost.basis}).` : `Cost: about ${cost.expected_cost.toFixed(2)} (${cost.basis}).`);
    }
    return lines;
  }

  function wireSubmit() {
    const form = $('[data-form="submit"]');
    if (!form) return;
    const text = form.elements.spec;
    const errors = $("[data-errors]", form);
    const plan = $("[data-plan]", form);
    // One key per filled-in form: a double click or a retry is the same submission.
    let idempotencyKey = crypto.randomUUID();
    text.addEventListener("input", () => (idempotencyKey = crypto.randomUUID()));
    form.elements.file.addEventListener("change", async () => {
      const file = form.elements.file.files[0];
      if (file) {
        text.value = await file.text();
        idempotencyKey = crypto.randomUUID();
      }
    });
    const showErrors = (result) => {
      errors.replaceChildren();
      plan.replaceChildren();
      const found = result.body?.errors || [];
      const heading = document.createElement("p");
      // The detail joins the errors' messages: with the list below it would say each twice.
      heading.textContent = found.length
        ? `${found.length} problem${found.length === 1 ? "" : "s"} in the spec; nothing was submitted:`
        : result.body?.detail || `The server answered ${result.status}`;
      errors.appendChild(heading);
      const list = document.createElement("ul");
      for (const e of found) {
        const item = document.createElement("li");
        item.dataset.field = e.field;
        if (!e.message.includes(`\`${e.field}\``)) {
          const code = document.createElement("code");
          code.textContent = e.field;
          item.append(code, ": ");
        }
        // The server writes field names and values between backticks.
        e.message.split("`").forEach((part, i) => {
          if (i % 2 === 0) return item.append(part);
          const code = document.createElement("code");
          code.textContent = part;
          item.append(code);
        });
        const line = lineOf(text.value, e.field);
        if (line) item.append(` (line ${line})`);
        list.appendChild(item);
      }
      if (list.children.length) errors.appendChild(list);
      text.setAttribute("aria-invalid", "true");
    };
    const send = (path) =>
      api("POST", path, {
        body: text.value,
        contentType: "application/yaml",
        extraHeaders: path === "/v1/jobs" ? { "Idempotency-Key": idempotencyKey } : {},
      });
    $('[data-action="plan"]', form).addEventListener("click", async () => {
      const result = await send("/v1/jobs/plan");
      if (!result.ok) return showErrors(result);
      errors.replaceChildren();
      text.removeAttribute("aria-invalid");
      plan.replaceChildren(...planLines(result.body).map((line) => {
        const p = document.createElement("p");
        p.textContent = line;
        return p;
      }));
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = $('[data-action="submit"]', form);
      button.disabled = true;
      const result = await send("/v1/jobs");
      button.disabled = false;
      if (!result.ok) return showErrors(result);
      location.href = `/jobs/${result.body.id}`;
    });
  }

  // --- times: local time in the tooltip ------------------------------------------------------
  function localTimes(root = document) {
    for (const node of $$("time[datetime]", root)) {
      if (node.dateTime) node.title = new Date(node.dateTime).toLocaleString();
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    wireTokenDialog();
    wireLiveFragments();
    wireCompareSelection();
    wireCancel();
    wireSubmit();
    wireJobCharts();
    wireCompareChart();
    wireUsageChart();
    wireSweep();
    localTimes();
    document.addEventListener("live-updated", (event) => localTimes(event.target));
    const logs = $("[data-logs]");
    if (logs) followLogs(logs);
  });
})();
