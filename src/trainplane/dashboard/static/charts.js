// trainplane dashboard charts: line charts (one or more series over steps),
// stacked bar charts and scatter charts (a sweep's trials), drawn as SVG
// with axes, labels, a legend and hover values.
// No dependencies. Exposes window.TrainplaneCharts.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const HEIGHT = 260;
  const MARGIN = { top: 12, right: 16, bottom: 42, left: 64 };
  // Paths longer than this are thinned for drawing; hover still reads every point.
  const MAX_DRAWN_POINTS = 1500;

  function el(name, attrs = {}, parent = null) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (parent) parent.appendChild(node);
    return node;
  }

  // Round tick steps (1, 2, 5 x 10^n) covering [lo, hi] with about `count` ticks.
  function ticks(lo, hi, count) {
    if (!(hi > lo)) {
      const pad = Math.abs(lo) * 0.1 || 1;
      lo -= pad;
      hi += pad;
    }
    const raw = (hi - lo) / Math.max(1, count);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
    const first = Math.floor(lo / step) * step;
    const last = Math.ceil(hi / step) * step;
    const values = [];
    for (let v = first; v <= last + step / 2; v += step) values.push(+v.toPrecision(12));
    return { lo: first, hi: last, values };
  }

  function format(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const abs = Math.abs(value);
    if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) return value.toExponential(2);
    return +value.toPrecision(4) + "";
  }

  function thin(points) {
    if (points.length <= MAX_DRAWN_POINTS) return points;
    const stride = points.length / MAX_DRAWN_POINTS;
    const kept = [];
    for (let i = 0; i < MAX_DRAWN_POINTS; i++) kept.push(points[Math.floor(i * stride)]);
    kept.push(points[points.length - 1]);
    return kept;
  }

  // The index of the point whose x is nearest to `x` (points sorted by x).
  function nearest(points, x) {
    let lo = 0;
    let hi = points.length - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] < x) lo = mid;
      else hi = mid;
    }
    return Math.abs(points[lo][0] - x) <= Math.abs(points[hi][0] - x) ? lo : hi;
  }

  function frame(container, width) {
    container.replaceChildren();
    container.classList.add("has-chart");
    const svg = el("svg", {
      viewBox: `0 0 ${width} ${HEIGHT}`,
      width: "100%",
      height: HEIGHT,
      preserveAspectRatio: "none",
      focusable: "false",
    });
    container.appendChild(svg);
    const tip = document.createElement("div");
    tip.className = "chart-tip";
    tip.hidden = true;
    container.appendChild(tip);
    return { svg, tip };
  }

  function axes(svg, width, x, y, xLabel, yLabel) {
    const g = el("g", { class: "axes" }, svg);
    const bottom = HEIGHT - MARGIN.bottom;
    for (const value of y.ticks) {
      const py = y.scale(value);
      el("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: py, y2: py, class: "grid" }, g);
      el("text", { x: MARGIN.left - 6, y: py + 4, "text-anchor": "end" }, g).textContent = format(value);
    }
    for (const value of x.ticks) {
      const px = x.scale(value);
      el("line", { x1: px, x2: px, y1: bottom, y2: bottom + 4, class: "tick" }, g);
      el("text", { x: px, y: bottom + 16, "text-anchor": "middle" }, g).textContent =
        x.label ? x.label(value) : format(value);
    }
    el("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: bottom, y2: bottom, class: "axis" }, g);
    el("line", { x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: bottom, class: "axis" }, g);
    el("text", { x: (MARGIN.left + width - MARGIN.right) / 2, y: HEIGHT - 6, "text-anchor": "middle", class: "axis-label" }, g).textContent = xLabel;
    el("text", {
      x: 14,
      y: (MARGIN.top + bottom) / 2,
      "text-anchor": "middle",
      transform: `rotate(-90 14 ${(MARGIN.top + bottom) / 2})`,
      class: "axis-label",
    }, g).textContent = yLabel;
  }

  function legend(container, names) {
    if (names.length < 2) return;
    const list = document.createElement("ul");
    list.className = "legend";
    names.forEach((name, i) => {
      const item = document.createElement("li");
      item.innerHTML = `<span class="swatch series-${i % 6}"></span>`;
      item.append(name);
      list.appendChild(item);
    });
    container.appendChild(list);
  }

  function linear(domainLo, domainHi, rangeLo, rangeHi) {
    const span = domainHi - domainLo || 1;
    return (v) => rangeLo + ((v - domainLo) / span) * (rangeHi - rangeLo);
  }

  // series: [{name, points: [[x, y], ...] sorted by x}]
  function lineChart(container, { series, xLabel = "step", yLabel = "" }) {
    const drawn = series.filter((s) => s.points.length);
    if (!drawn.length) return false;
    const width = Math.max(320, Math.round(container.clientWidth || 640));
    const { svg, tip } = frame(container, width);
    const xs = drawn.flatMap((s) => [s.points[0][0], s.points[s.points.length - 1][0]]);
    const ys = drawn.flatMap((s) => s.points.map((p) => p[1])).filter(Number.isFinite);
    const xt = ticks(Math.min(...xs), Math.max(...xs), 6);
    const yt = ticks(Math.min(...ys), Math.max(...ys), 5);
    const x = { ticks: xt.values, scale: linear(xt.lo, xt.hi, MARGIN.left, width - MARGIN.right) };
    const y = { ticks: yt.values, scale: linear(yt.lo, yt.hi, HEIGHT - MARGIN.bottom, MARGIN.top) };
    axes(svg, width, x, y, xLabel, yLabel);
    series.forEach((s, i) => {
      if (!s.points.length) return;
      const d = thin(s.points)
        .filter((p) => Number.isFinite(p[1]))
        .map((p, j) => `${j ? "L" : "M"}${x.scale(p[0]).toFixed(1)},${y.scale(p[1]).toFixed(1)}`)
        .join("");
      el("path", { d, class: `line series-${i % 6}`, "data-series": s.name, "data-count": s.points.length }, svg);
    });
    legend(container, series.map((s) => s.name));

    const cursor = el("line", { class: "cursor", y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom, visibility: "hidden" }, svg);
    const dots = series.map((s, i) => el("circle", { r: 3.5, class: `dot series-${i % 6}`, visibility: "hidden" }, svg));
    const longest = drawn.reduce((a, b) => (b.points.length > a.points.length ? b : a));
    let index = null;

    function show(atX) {
      cursor.setAttribute("x1", x.scale(atX));
      cursor.setAttribute("x2", x.scale(atX));
      cursor.setAttribute("visibility", "visible");
      const lines = [`${xLabel} ${format(atX)}`];
      series.forEach((s, i) => {
        if (!s.points.length) return;
        const p = s.points[nearest(s.points, atX)];
        dots[i].setAttribute("cx", x.scale(p[0]));
        dots[i].setAttribute("cy", y.scale(p[1]));
        dots[i].setAttribute("visibility", "visible");
        lines.push(`${s.name}: ${format(p[1])}${p[0] !== atX ? ` (at ${format(p[0])})` : ""}`);
      });
      tip.textContent = lines.join("\n");
      tip.hidden = false;
      const left = (x.scale(atX) / width) * container.clientWidth;
      tip.style.left = `${Math.min(left + 12, container.clientWidth - tip.offsetWidth - 4)}px`;
    }
    function hide() {
      cursor.setAttribute("visibility", "hidden");
      dots.forEach((d) => d.setAttribute("visibility", "hidden"));
      tip.hidden = true;
    }
    const overlay = el("rect", {
      x: MARGIN.left, y: MARGIN.top, width: width - MARGIN.left - MARGIN.right,
      height: HEIGHT - MARGIN.top - MARGIN.bottom, class: "hover-area",
    }, svg);
    overlay.addEventListener("mousemove", (event) => {
      const box = svg.getBoundingClientRect();
      const px = ((event.clientX - box.left) / box.width) * width;
      const atX = xt.lo + ((px - MARGIN.left) / (width - MARGIN.left - MARGIN.right)) * (xt.hi - xt.lo);
      index = nearest(longest.points, atX);
      show(longest.points[index][0]);
    });
    overlay.addEventListener("mouseleave", hide);
    // Keyboard: the chart body is focusable; arrows walk the points.
    container.tabIndex = 0;
    container.onkeydown = (event) => {
      if (!["ArrowLeft", "ArrowRight", "Home", "End", "Escape"].includes(event.key)) return;
      event.preventDefault();
      if (event.key === "Escape") return hide();
      const last = longest.points.length - 1;
      if (event.key === "Home") index = 0;
      else if (event.key === "End" || index === null) index = last;
      else index = Math.max(0, Math.min(last, index + (event.key === "ArrowLeft" ? -1 : 1)));
      show(longest.points[index][0]);
    };
    container.onblur = hide;
    return true;
  }

  // categories: labels along x; series: [{name, values: [per category]}], stacked.
  function stackedBars(container, { categories, series, yLabel = "" }) {
    const width = Math.max(320, Math.round(container.clientWidth || 640));
    const { svg, tip } = frame(container, width);
    const totals = categories.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
    const yt = ticks(0, Math.max(...totals, 0) || 1, 5);
    const band = (width - MARGIN.left - MARGIN.right) / Math.max(1, categories.length);
    const labelEvery = Math.ceil(categories.length / 10);
    const x = {
      ticks: categories.map((_, i) => i).filter((i) => i % labelEvery === 0),
      scale: (i) => MARGIN.left + band * (i + 0.5),
      label: (i) => categories[i],
    };
    const y = { ticks: yt.values, scale: linear(0, yt.hi, HEIGHT - MARGIN.bottom, MARGIN.top) };
    axes(svg, width, x, y, "day (UTC)", yLabel);
    categories.forEach((category, i) => {
      let base = 0;
      const group = el("g", { class: "bar", "data-category": category, tabindex: 0 }, svg);
      series.forEach((s, k) => {
        const value = s.values[i] || 0;
        if (!value) return;
        const top = y.scale(base + value);
        el("rect", {
          x: MARGIN.left + band * i + band * 0.15, width: Math.max(1, band * 0.7),
          y: top, height: Math.max(0.5, y.scale(base) - top), class: `series-${k % 6}`,
        }, group);
        base += value;
      });
      el("rect", { x: MARGIN.left + band * i, width: band, y: MARGIN.top, height: HEIGHT - MARGIN.top - MARGIN.bottom, class: "hover-area" }, group);
      const show = () => {
        const lines = [category, ...series.filter((s) => s.values[i]).map((s) => `${s.name}: ${format(s.values[i])}`), `total: ${format(totals[i])}`];
        tip.textContent = lines.join("\n");
        tip.hidden = false;
        const left = (x.scale(i) / width) * container.clientWidth;
        tip.style.left = `${Math.min(left + 12, container.clientWidth - tip.offsetWidth - 4)}px`;
      };
      group.addEventListener("mouseenter", show);
      group.addEventListener("focus", show);
      group.addEventListener("mouseleave", () => (tip.hidden = true));
      group.addEventListener("blur", () => (tip.hidden = true));
    });
    legend(container, series.map((s) => s.name));
  }

  // Powers of ten covering [lo, hi] (both > 0), with 2 and 5 between them
  // when the range spans few decades.
  function logTicks(lo, hi) {
    let first = Math.floor(Math.log10(lo));
    let last = Math.ceil(Math.log10(hi));
    if (last === first) last += 1;
    const steps = last - first <= 2 ? [1, 2, 5] : [1];
    const values = [];
    for (let p = first; p <= last; p++) {
      for (const m of steps) {
        const v = +(m * Math.pow(10, p)).toPrecision(12);
        if (v <= Math.pow(10, last)) values.push(v);
      }
    }
    return { lo: Math.pow(10, first), hi: Math.pow(10, last), values };
  }

  // One dot per point: [{x, y, label, href, best, status}]. scale: "linear",
  // "log" (x > 0) or "category" (x are labels, in order of first sight).
  // The best point is drawn larger and ringed; each dot links to `href`.
  function scatterChart(container, { points, xLabel = "", yLabel = "", scale = "linear" }) {
    const drawn = points.filter((p) => Number.isFinite(p.y) && (scale === "category" || Number.isFinite(p.x)) && (scale !== "log" || p.x > 0));
    if (!drawn.length) return false;
    const width = Math.max(320, Math.round(container.clientWidth || 640));
    const { svg, tip } = frame(container, width);
    const left = MARGIN.left;
    const right = width - MARGIN.right;
    let x;
    if (scale === "category") {
      const categories = Array.from(new Set(drawn.map((p) => String(p.x))));
      const band = (right - left) / categories.length;
      x = {
        ticks: categories.map((_, i) => i),
        scale: (i) => left + band * (i + 0.5),
        label: (i) => categories[i],
        of: (value) => categories.indexOf(String(value)),
      };
    } else if (scale === "log") {
      const xt = logTicks(Math.min(...drawn.map((p) => p.x)), Math.max(...drawn.map((p) => p.x)));
      const toPx = linear(Math.log10(xt.lo), Math.log10(xt.hi), left, right);
      x = { ticks: xt.values, scale: (v) => toPx(Math.log10(v)), of: (v) => v };
    } else {
      const xs = drawn.map((p) => p.x);
      const xt = ticks(Math.min(...xs), Math.max(...xs), 6);
      x = { ticks: xt.values, scale: linear(xt.lo, xt.hi, left, right), of: (v) => v };
    }
    const ys = drawn.map((p) => p.y);
    const yt = ticks(Math.min(...ys), Math.max(...ys), 5);
    const y = { ticks: yt.values, scale: linear(yt.lo, yt.hi, HEIGHT - MARGIN.bottom, MARGIN.top) };
    axes(svg, width, x, y, xLabel, yLabel);
    svg.dataset.scale = scale;
    // The best last, so that it is drawn on top.
    const ordered = drawn.filter((p) => !p.best).concat(drawn.filter((p) => p.best));
    for (const p of ordered) {
      const link = el("a", { href: p.href || "#", class: "point" }, svg);
      const dot = el("circle", {
        cx: x.scale(x.of(p.x)).toFixed(1),
        cy: y.scale(p.y).toFixed(1),
        r: p.best ? 7 : 4.5,
        class: `dot series-0${p.best ? " best" : ""} status-${String(p.status || "").toLowerCase()}`,
        "data-x": p.x,
        "data-y": p.y,
        "data-label": p.label,
      }, link);
      if (p.best) dot.dataset.best = "true";
      const words = `${p.label}${p.best ? " (best)" : ""}\n${xLabel} ${typeof p.x === "number" ? format(p.x) : p.x}\n${yLabel} ${format(p.y)}`;
      el("title", {}, dot).textContent = words;
      const show = () => {
        tip.textContent = words;
        tip.hidden = false;
        const at = (x.scale(x.of(p.x)) / width) * container.clientWidth;
        tip.style.left = `${Math.min(at + 12, container.clientWidth - tip.offsetWidth - 4)}px`;
      };
      link.addEventListener("mouseenter", show);
      link.addEventListener("focus", show);
      link.addEventListener("mouseleave", () => (tip.hidden = true));
      link.addEventListener("blur", () => (tip.hidden = true));
    }
    return true;
  }

  window.TrainplaneCharts = { lineChart, stackedBars, scatterChart, ticks, logTicks, format };
})();
