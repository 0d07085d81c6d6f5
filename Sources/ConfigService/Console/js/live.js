// Live data of a project: the per-minute counts, the newest events and the rejected records, and
// the health of the services behind config-service, each refreshed every few seconds while the
// page is open.
import { api, seg } from "./api.js";
import { h, svg, clear, notice, time, empty, pretty } from "./dom.js";

const REFRESH_MS = 5000;
const SERIES = [
  { name: "received", label: "received" },
  { name: "stored", label: "stored" },
  { name: "duplicates", label: "duplicates" },
  { name: "rejected", label: "rejected" },
];

export async function liveView(main, project) {
  const base = `/v1/projects/${seg(project)}`;
  const filters = { event: "", distinct_id: "", user_id: "" };
  const chart = h("div.chart");
  const events = h("div.events");
  const rejected = h("div.rejected");
  const services = h("div.services");
  const status = h("div.status", { "aria-live": "polite" });
  const hours = h("select#chart-hours", { "aria-label": "Hours shown", onchange: () => refreshCounts() },
    [1, 3, 6, 24, 72].map((n) => h("option", { value: n, selected: n === 3 }, `last ${n} h`)));
  const auto = h("input#auto-refresh", { type: "checkbox", checked: true });
  const open = new Set();

  const field = (name, label, attrs = {}) => {
    const el = h("input", { id: `filter-${name}`, name, placeholder: label, size: 16, ...attrs });
    el.addEventListener("change", () => { filters[name] = el.value.trim(); refreshEvents(); });
    return h("label", label, " ", el);
  };

  async function refreshCounts() {
    const answer = await api.get(`${base}/ingest-counts`, { hours: hours.value });
    clear(chart, countsChart(answer.minutes, +answer.hours));
  }

  async function refreshEvents() {
    const answer = await api.get(`${base}/events`, { ...filters, limit: 50 });
    if (answer.events.length === 0) return clear(events, empty("No events match yet. Events appear here seconds after the gateway stores them."));
    clear(events, h("table.grid.events-table",
      h("thead", h("tr", ["Time", "Event", "Distinct id", "User", "Lib", "App version", ""].map((t) => h("th", t)))),
      h("tbody", answer.events.map((e) => eventRows(e, open)))));
  }

  async function refreshRejected() {
    const answer = await api.get(`${base}/rejected`, { limit: 20 });
    if (answer.rejected.length === 0) return clear(rejected, empty("No rejected records."));
    clear(rejected, h("table.grid.rejected-table",
      h("thead", h("tr", h("th", "Received"), h("th", "Reason"), h("th", "Record as received"))),
      h("tbody", answer.rejected.map((r) => h("tr",
        h("td", time(r.received_at)), h("td.reason", r.reason),
        h("td", h("details", h("summary", `${r.raw.slice(0, 60)}${r.raw.length > 60 || r.raw_truncated ? "…" : ""}`), h("pre.code", r.raw))))))));
  }

  async function refreshServices() {
    const answer = await api.get("/v1/status");
    clear(services, h("table.grid.services-table",
      h("thead", h("tr", h("th", "Service"), h("th", "Ready"), h("th", "Up"), h("th", "Version"), h("th", "Address"), h("th", "Figures"))),
      h("tbody", answer.services.map(serviceRow))));
  }

  async function refresh() {
    try {
      await Promise.all([refreshCounts(), refreshEvents(), refreshRejected(), refreshServices()]);
      clear(status, h("p.muted.small", `Updated ${new Date().toLocaleTimeString()}`));
    } catch (error) {
      clear(status, notice("error", error.message));
    }
  }

  clear(main,
    h("h1", `Live data · ${project}`),
    h("div.toolbar", hours, h("label", auto, " refresh every 5 s"), h("button", { type: "button", onclick: refresh }, "Refresh now"), status),
    h("section", h("h2", "Records per minute"), chart),
    h("section", h("h2", "Newest events"),
      h("form.filters.inline", { onsubmit: (event) => { event.preventDefault(); refreshEvents(); } },
        field("event", "Event"), field("distinct_id", "Distinct id"), field("user_id", "User", { inputmode: "numeric", size: 8 })),
      events),
    h("section", h("h2", "Rejected records"), rejected),
    h("section", h("h2", "Services"),
      h("p.muted.small", "Each replica of the gateway (with config-service's GATEWAY_URL set), identity-service and the collector, as its /ready and /metrics answer (alerts and runbook: docs/OPERATING.md; `datongctl status` shows the same)."),
      services),
  );
  await refresh();
  const timer = setInterval(() => { if (auto.checked && !document.hidden) refresh(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

/** The first sample of a metric in Prometheus' text format (`name{labels} value`), or null. */
export function metric(text, name) {
  for (const line of (text || "").split("\n")) {
    if (line.startsWith(name + " ") || line.startsWith(name + "{")) return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return null;
}

export function seconds(value) {
  if (value === null || value < 0) return "—";
  if (value < 60) return `${value.toFixed(1)} s`;
  if (value < 3600) return `${Math.floor(value / 60)} min`;
  return `${Math.floor(value / 3600)} h ${Math.floor(value % 3600 / 60)} min`;
}

/** A service's readiness (with its failed checks), uptime and the figures an operator reads first. */
function serviceRow(service) {
  const checks = (() => { try { return JSON.parse(service.readiness || "{}").checks || {}; } catch { return {}; } })();
  const failed = Object.keys(checks).filter((name) => checks[name] !== "ok");
  const ready = service.error ? "unreachable" : service.ready ? "yes" : `no${failed.length ? ` (${failed.join(", ")})` : ""}`;
  const started = metric(service.metrics, "process_start_time_seconds");
  const figures = [];
  if (service.name === "bridge-gateway") {
    const refreshed = metric(service.metrics, "datong_identity_cache_last_refresh_timestamp_seconds");
    if (refreshed !== null && refreshed > 0) figures.push(`identity cache refreshed ${seconds(Date.now() / 1000 - refreshed)} ago`);
  }
  if (service.name === "collector") {
    const waiting = metric(service.metrics, "datong_collector_waiting_records");
    const rollups = metric(service.metrics, "datong_report_rollup_age_seconds");
    const standbys = metric(service.metrics, "datong_postgres_standbys");
    const ahead = metric(service.metrics, "datong_collector_partition_months_ahead");
    if (waiting !== null) figures.push(`${waiting} records waiting`);
    if (rollups !== null) figures.push(`report rollups ${seconds(rollups)} behind`);
    if (standbys !== null) figures.push(`${standbys} standby(s) streaming`);
    if (ahead !== null) figures.push(`${ahead} months of partitions ahead`);
  }
  const refusals = (service.metrics || "").split("\n").filter((line) => line.startsWith("datong_refusals_total{"))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
  if (service.metrics) figures.push(`${refusals} refusals since it started`);
  const version = (/^datong_build_info\{[^}]*version="([^"]*)"/m.exec(service.metrics || "") || [])[1];
  return h("tr", { dataset: { service: service.name } },
    h("td", h("strong", service.name)), h("td.ready", ready),
    h("td", started === null ? "—" : seconds(Date.now() / 1000 - started)), h("td.version", version || "—"),
    h("td.small", service.url), h("td", figures.join(" · ") || "—"));
}

/** A row per event; a click opens its properties, lib, identities and H5 flag. */
function eventRows(e, open) {
  // What the gateway added from the request (docs/ANALYTICS.md, "What the server adds").
  const p = e.properties && typeof e.properties === "object" ? e.properties : {};
  const joined = (...parts) => parts.filter((part) => part !== undefined && part !== null && part !== "").join(" ") || "—";
  const detail = h("tr.event-detail", { hidden: !open.has(e.event_id) },
    h("td", { colspan: 7 }, h("div.detail-grid",
      h("div", h("h4", "Properties"), h("pre.code", pretty(e.properties))),
      h("div",
        h("h4", "Where it came from"),
        h("dl",
          h("dt", "type"), h("dd", e.type),
          h("dt", "lib"), h("dd", `${e.lib ?? "—"} ${e.lib_version ?? ""}`),
          h("dt", "lib method"), h("dd", e.lib_method ?? "—"),
          h("dt", "H5 in app"), h("dd", e.hybrid_h5 ? "yes (relayed by the app)" : "no"),
          h("dt", "received"), h("dd", time(e.received_at)),
          h("dt", "address"), h("dd", p.$ip ?? "—"),
          h("dt", "region"), h("dd", joined(p.$country, p.$province, p.$city)),
          h("dt", "browser"), h("dd", joined(p.$browser, p.$browser_version, p.$os ? `on ${p.$os}` : null, p.$os_version)),
          h("dt", "stored user"), h("dd", e.stored_user_id ?? "—"),
          h("dt", "anonymous id"), h("dd", e.anonymous_id ?? "—"),
          h("dt", "login id"), h("dd", e.login_id ?? "—"),
          h("dt", "event id"), h("dd", h("code", e.event_id))),
        h("h4", "Identities"),
        e.identities ? h("pre.code", pretty(e.identities)) : h("p.muted", "none sent")))));
  const toggle = () => {
    detail.hidden = !detail.hidden;
    if (detail.hidden) open.delete(e.event_id); else open.add(e.event_id);
    button.setAttribute("aria-expanded", String(!detail.hidden));
  };
  const button = h("button.link", { type: "button", "aria-expanded": String(open.has(e.event_id)), onclick: toggle }, "details");
  const row = h("tr.event-row", { dataset: { event: e.event, distinctId: e.distinct_id } },
    h("td", time(e.time)), h("td", h("strong", e.event), e.hybrid_h5 ? h("span.badge", "H5") : null),
    h("td.id", e.distinct_id), h("td", e.user_id ?? "—"), h("td", e.lib ?? "—"), h("td", e.app_version ?? "—"), h("td", button));
  return [row, detail];
}

/** An inline SVG line chart of the four counts per minute. */
function countsChart(minutes, hours) {
  if (minutes.length === 0) return empty(`Nothing received in the last ${hours} h.`);
  const width = 900, height = 180, left = 44, bottom = 22, top = 10;
  const end = Math.ceil(Date.now() / 60000) * 60000;
  const start = end - hours * 3600000;
  const max = Math.max(1, ...minutes.map((m) => m.received));
  const x = (t) => left + ((t - start) / (end - start)) * (width - left - 8);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const byMinute = new Map(minutes.map((m) => [new Date(m.minute).getTime(), m]));
  const lines = SERIES.map((s) => {
    // Minutes with no record are zero, so a quiet minute drops to the axis.
    const points = [];
    for (let t = start; t <= end; t += 60000) points.push(`${x(t).toFixed(1)},${y(byMinute.get(t)?.[s.name] ?? 0).toFixed(1)}`);
    return svg("polyline", { class: `series ${s.name}`, points: points.join(" ") });
  });
  const ticks = [0, 0.5, 1].map((f) => svg("g", {},
    svg("line", { class: "grid-line", x1: left, x2: width - 8, y1: y(max * f), y2: y(max * f) }),
    Object.assign(svg("text", { x: left - 6, y: y(max * f) + 4, "text-anchor": "end" }), { textContent: String(Math.round(max * f)) })));
  const labels = [start, (start + end) / 2, end].map((t, i) =>
    Object.assign(svg("text", { x: x(t), y: height - 4, "text-anchor": ["start", "middle", "end"][i] }), { textContent: new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }));
  const totals = Object.fromEntries(SERIES.map((s) => [s.name, minutes.reduce((sum, m) => sum + m[s.name], 0)]));
  return h("figure",
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `Records per minute over the last ${hours} hours` }, ticks, lines, labels),
    h("figcaption.legend", SERIES.map((s) => h(`span.key.${s.name}`, `${s.label} ${totals[s.name]}`))));
}
