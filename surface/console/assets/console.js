// infergate's operator console: polls GET /console/api/state and draws it. Plain DOM and inline
// SVG, no framework; every value is written with textContent, never as HTML.
"use strict";
(function () {
  // The page polls every 2 s; ?refresh=MS changes that (250 ms to 60 s).
  const asked = Number(new URLSearchParams(location.search).get("refresh"));
  const POLL_MS = asked ? Math.min(Math.max(asked, 250), 60000) : 2000;
  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
    return e;
  }

  const num = (v, d = 1) => (v == null ? "–" : Number(v).toLocaleString(undefined, { maximumFractionDigits: d }));
  const pct = (v) => (v == null ? "–" : (v * 100).toFixed(0) + "%");
  function dur(s) {
    if (s == null) return "–";
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    const h = Math.floor(s / 3600);
    return (h < 48 ? h + "h " + Math.floor((s % 3600) / 60) + "m" : Math.floor(h / 24) + "d " + (h % 24) + "h");
  }
  function bytes(b) {
    if (b == null) return "–";
    const u = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return b.toFixed(i ? 1 : 0) + " " + u[i];
  }

  function fillTable(id, rows, empty) {
    const body = $(id).tBodies[0];
    const cols = $(id).tHead.rows[0].cells.length;
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { class: "empty", colspan: cols }, empty))]));
  }

  // chart draws up to two series as polylines scaled to their common maximum.
  function chart(id, t, a, b) {
    const svg = $(id);
    const W = 300, H = 100, P = 2;
    const max = Math.max(1e-9, ...a, ...(b || []));
    const line = (vals, cls) => {
      const n = vals.length;
      if (!n) return null;
      const pts = vals.map((v, i) => ((n === 1 ? W : (i / (n - 1)) * W).toFixed(1) + "," + (H - P - (v / max) * (H - 2 * P)).toFixed(1)));
      const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      pl.setAttribute("points", pts.join(" "));
      pl.setAttribute("class", cls);
      return pl;
    };
    const grid = document.createElementNS("http://www.w3.org/2000/svg", "line");
    grid.setAttribute("x1", 0); grid.setAttribute("x2", W); grid.setAttribute("y1", P); grid.setAttribute("y2", P);
    grid.setAttribute("class", "grid");
    svg.replaceChildren(grid, ...[line(a, "s1"), b && line(b, "s2")].filter(Boolean));
    svg.setAttribute("data-points", String(a.length));
    // Text stays out of the SVG, which stretches to its box: the peak is written under it.
    svg.nextElementSibling.querySelector(".peak").textContent = "top line " + num(max, 2);
  }

  function overview(s) {
    const o = s.overview;
    const cards = [
      ["requests/s", num(o.requests_per_second, 2), "rps"],
      ["errors/s", num(o.errors_per_second, 2), "eps"],
      ["refused/s", num(o.refused_per_second, 2), "refused"],
      ["p50 latency", num(o.latency_p50_ms) + " ms", "p50"],
      ["p99 latency", num(o.latency_p99_ms) + " ms", "p99"],
      ["TTFT p50 / p99", num(o.ttft_p50_ms) + " / " + num(o.ttft_p99_ms) + " ms", "ttft"],
      ["tokens in/s", num(o.tokens_in_per_second, 1), "tin"],
      ["tokens out/s", num(o.tokens_out_per_second, 1), "tout"],
      ["in flight", num(o.in_flight, 0), "inflight"],
      ["requests (15 min)", num(o.requests_in_window, 0), "total"],
    ];
    $("cards").replaceChildren(...cards.map(([l, v, k]) => el("div", { class: "card", "data-card": k }, el("div", { class: "v" }, v), el("div", { class: "l" }, l))));
    const sr = o.series;
    chart("chart-rps", sr.t, sr.requests_per_second, sr.errors_per_second);
    chart("chart-latency", sr.t, sr.latency_p50_ms, sr.latency_p99_ms);
    chart("chart-ttft", sr.t, sr.ttft_p50_ms, sr.ttft_p99_ms);
    chart("chart-tokens", sr.t, sr.tokens_in_per_second, sr.tokens_out_per_second);
  }

  function upstreams(s) {
    const now = s.now;
    fillTable("upstream-table", s.upstreams.map((u) => el("tr", { class: u.healthy ? "up" : "down", "data-upstream": u.name },
      el("td", {}, el("strong", {}, u.name), el("br"), el("small", { class: "muted" }, u.type + " · " + u.url + (u.priority ? " · priority " + u.priority : ""))),
      el("td", { class: "health" }, u.healthy ? "healthy" : "down"),
      el("td", {}, u.breaker || "–", u.breaker_retry_after_seconds ? " (" + dur(u.breaker_retry_after_seconds) + ")" : ""),
      el("td", {}, u.next_check ? "in " + dur((u.next_check - now) / 1000) : "–"),
      el("td", {}, num(u.outstanding, 0)),
      el("td", {}, num(u.requests, 0), u.failed ? " (" + num(u.failed, 0) + " failed)" : ""),
      el("td", {}, u.latency_avg_ms ? num(u.latency_avg_ms) + " ms" : "–"),
      el("td", {}, u.vllm ? num(u.vllm.running, 0) + " running, " + num(u.vllm.waiting, 0) + " waiting" : "–"),
      el("td", {}, u.vllm ? num(u.vllm.kv_cache_usage) + "%" : "–"),
      el("td", {}, u.models.join(", ") || "–"),
      el("td", { class: "err" }, u.last_error || ""))), "No upstreams configured.");
    fillTable("backend-table", s.backends.map((b) => el("tr", {},
      el("td", {}, b.model), el("td", {}, b.type), el("td", {}, b.url), el("td", {}, el("code", {}, b.lease)),
      el("td", {}, dur((b.expires - now) / 1000)))), "No backend registered.");
  }

  function models(s) {
    fillTable("llm-table", s.llms.map((m) => el("tr", { "data-llm": m.name },
      el("td", {}, el("strong", {}, m.name), el("br"), el("small", { class: "muted" }, m.endpoints.join(", "))),
      el("td", {}, num(m.requests_per_second, 2)),
      el("td", {}, num(m.errors, 0)),
      el("td", {}, num(m.refused, 0)),
      el("td", {}, num(m.context_length_refusals, 0)),
      el("td", {}, num(m.latency_p50_ms) + " / " + num(m.latency_p99_ms)),
      el("td", {}, num(m.ttft_p50_ms) + " / " + num(m.ttft_p99_ms)),
      el("td", {}, num(m.itl_p50_ms, 2)),
      el("td", { "data-cache-hit-rate": m.cache_hit_rate == null ? "" : String(m.cache_hit_rate) }, pct(m.cache_hit_rate), m.cache_hits ? " (" + m.cache_hits + " hits)" : ""),
      el("td", {}, m.cache_entries == null ? "–" : num(m.cache_entries, 0) + " entries, " + bytes(m.cache_bytes)),
      el("td", {}, m.active_sessions == null ? "–" : num(m.active_sessions, 0)),
      el("td", {}, pct(m.disaggregated_rate)),
      el("td", { "data-prefix-hit-rate": m.prefix_hit_rate == null ? "" : String(m.prefix_hit_rate) }, pct(m.prefix_hit_rate)),
      el("td", { class: "stages" }, el("small", {}, m.stages.join(" → "))))), "No LLM routed.");
    fillTable("tensor-table", s.tensor_models.map((t) => el("tr", { "data-tensor": t.name },
      el("td", {}, t.name, el("small", { class: "muted" }, " v" + t.version)),
      el("td", {}, t.ready ? "ready" : "not ready"),
      el("td", {}, num(t.inference_count, 0)),
      el("td", {}, num(t.execution_count, 0)),
      el("td", {}, num(t.failed, 0)),
      el("td", {}, num(t.queue_avg_ms, 3)),
      el("td", {}, num(t.compute_avg_ms, 3)),
      el("td", {}, t.batch_sizes.map((b) => b.size + "×" + b.count).join(", ") || "–"),
      el("td", { class: "stages" }, el("small", {}, t.stages.join(" → "))))), "No tensor model.");
  }

  function batches(s) {
    const list = $("batch-list");
    if (!s.batches.length) { list.replaceChildren(el("p", { class: "empty" }, "No batch.")); return; }
    list.replaceChildren(...s.batches.map((b) => {
      const total = Math.max(b.total, 1);
      const bar = el("div", { class: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": String(b.total), "aria-valuenow": String(b.completed + b.failed) },
        el("div", { class: "done" }), el("div", { class: "failed" }));
      bar.children[0].style.width = (100 * b.completed / total).toFixed(2) + "%";
      bar.children[1].style.width = (100 * b.failed / total).toFixed(2) + "%";
      return el("div", { class: "batch", "data-batch": b.id, "data-done": String(b.completed + b.failed), "data-total": String(b.total) },
        el("div", { class: "row" }, el("code", {}, b.id), el("span", {}, b.status), el("span", { class: "muted" }, (b.model || "") + " " + b.endpoint)),
        bar,
        el("div", { class: "row" },
          el("span", {}, b.completed + " done · " + b.failed + " failed · " + b.total + " total"),
          el("span", { class: "muted" }, num(b.lines_per_second, 2) + " lines/s" + (b.eta_seconds ? " · ETA " + dur(b.eta_seconds) : ""))));
    }));
  }

  function keys(s) {
    fillTable("key-table", s.keys.map((k) => el("tr", { "data-key": k.name },
      el("td", {}, k.name), el("td", {}, num(k.requests, 0)), el("td", {}, num(k.refused, 0)), el("td", {}, num(k.errors, 0)),
      el("td", {}, num(k.tokens_in, 0)), el("td", {}, num(k.tokens_out, 0)))), "No traffic with API keys in the window (or keys are off).");
  }

  let lastConfig = "";
  function render(s) {
    $("version").textContent = "version " + (s.version || "dev");
    $("uptime").textContent = "up " + dur(s.uptime_seconds);
    $("config-path").textContent = s.config_path || "–";
    const cfg = JSON.stringify(s.config, null, 2);
    if (cfg !== lastConfig) { $("config-json").textContent = cfg; lastConfig = cfg; }
    overview(s); upstreams(s); models(s); batches(s); keys(s);
    document.body.setAttribute("data-updated", String(s.now));
  }

  async function poll() {
    const st = $("status");
    try {
      const res = await fetch("/console/api/state", { credentials: "same-origin", cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      render(await res.json());
      st.textContent = "live"; st.className = "pill live";
    } catch (e) {
      st.textContent = "stale: " + e.message; st.className = "pill stale";
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
