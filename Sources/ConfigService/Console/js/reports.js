// Reports: the report functions of docs/ANALYTICS.md drawn — trend lines, funnel bars, the retention
// triangle, a histogram, a person's timeline — each with its rows as a table and as CSV. The query
// lives in the page's URL (#/p/{project}/reports/{kind}?from_day=…), so a report is shared by its link
// and runs again when the link is opened.
import { api, seg } from "./api.js";
import { h, svg, clear, notice, empty, formatTime } from "./dom.js";
import { metric, seconds } from "./live.js";

// Days as this browser counts them (YYYY-MM-DD); the reports count the project's.
const localDay = (date) => `${date.getFullYear()}-${String(date.getMonth() + 1).padStart(2, "0")}-${String(date.getDate()).padStart(2, "0")}`;
const today = () => localDay(new Date());
const daysAgo = (n) => localDay(new Date(Date.now() - n * 86400000));

// Each report's form: a field per argument of its function (docs/ANALYTICS.md names them).
// kind: text, names (comma-separated), lines (one a line; JSON when it starts with "{"), day, int,
// json, numbers (comma-separated), or a list of choices.
const DAYS = [
  { name: "from_day", label: "From", kind: "day", initial: () => daysAgo(29), required: true },
  { name: "to_day", label: "To", kind: "day", initial: today, required: true },
];
export const REPORTS = [
  {
    id: "trend", title: "Trend", help: "Events, people or a property's sum, average, minimum or maximum per period (analytics.event_trend).",
    fields: [
      { name: "events", label: "Events", kind: "names", placeholder: "Pay, AddToCart (or *)", required: true },
      ...DAYS,
      { name: "unit", label: "Per", kind: ["day", "hour", "week", "month", "all"] },
      { name: "measure", label: "Measure", kind: ["events", "people", "sum", "avg", "min", "max"] },
      { name: "property", label: "Of property", kind: "text", placeholder: "price (sum, avg, min, max)" },
      { name: "group_by", label: "Group by", kind: "text", placeholder: "lib, $city, user.gender" },
      { name: "top", label: "Top", kind: "int", placeholder: "10" },
      { name: "filters", label: "Filters", kind: "json", placeholder: '[{"property": "price", "op": ">", "value": 100}]' },
    ],
  },
  {
    id: "funnel", title: "Funnel", help: "People who did each step in order within the window from their first step (analytics.funnel).",
    fields: [
      { name: "steps", label: "Steps", kind: "lines", placeholder: '$AppStart\nAddToCart\n{"event": "Pay", "filters": []}', required: true },
      ...DAYS,
      { name: "window_seconds", label: "Window", numeric: true, kind: [["86400", "1 day"], ["3600", "1 hour"], ["604800", "7 days"], ["2592000", "30 days"]] },
      { name: "group_by", label: "Group by", kind: "text", placeholder: "a property of the first step" },
      { name: "top", label: "Top", kind: "int", placeholder: "10" },
    ],
  },
  {
    id: "retention", title: "Retention", help: "Of the people who did the start event in a period, those who did the return event k periods later (analytics.retention).",
    fields: [
      { name: "start_event", label: "Start event", kind: "text", placeholder: "$AppStart", required: true },
      { name: "return_event", label: "Return event", kind: "text", placeholder: "$AppStart", required: true },
      ...DAYS,
      { name: "unit", label: "Cohorts by", kind: ["day", "week"] },
      { name: "periods", label: "Periods", kind: "int", placeholder: "7" },
      { name: "start_filters", label: "Start filters", kind: "json", placeholder: "[]" },
      { name: "return_filters", label: "Return filters", kind: "json", placeholder: "[]" },
    ],
  },
  {
    id: "distribution", title: "Distribution", help: "People by how many times they did an event (or a property's sum over it), in buckets (analytics.distribution).",
    fields: [
      { name: "event", label: "Event", kind: "text", placeholder: "ViewProduct", required: true },
      ...DAYS,
      { name: "measure", label: "Measure", kind: ["events", "sum"] },
      { name: "property", label: "Of property", kind: "text", placeholder: "price (sum)" },
      { name: "buckets", label: "Buckets from", kind: "numbers", placeholder: "1, 2, 3, 5, 10" },
      { name: "filters", label: "Filters", kind: "json", placeholder: "[]" },
    ],
  },
  {
    id: "user", title: "A person's events", help: "Every event of a person across their merged users, apps and H5 pages, newest first (analytics.user_events).",
    fields: [
      { name: "user_id", label: "User number", kind: "int", placeholder: "42", required: true },
      { name: "page_size", label: "Page size", kind: "int", placeholder: "100" },
      { name: "before", label: "Older than", kind: "text", placeholder: "the next of a page's last row" },
    ],
  },
];

/** The body of a report's call from the form's text values; throws with what is wrong. */
export function reportBody(report, values) {
  const body = {};
  for (const field of report.fields) {
    const text = (values[field.name] ?? "").trim();
    if (text === "") {
      if (field.required) throw new Error(`${field.label} is needed.`);
      continue;
    }
    switch (field.kind) {
      case "names": body[field.name] = text.split(",").map((s) => s.trim()).filter(Boolean); break;
      case "numbers": body[field.name] = text.split(",").map((s) => Number(s.trim())); break;
      case "int": body[field.name] = Number(text); break;
      case "lines": body[field.name] = text.split("\n").map((s) => s.trim()).filter(Boolean).map((s) => (s.startsWith("{") ? parseJSON(s, field.label) : s)); break;
      case "json": body[field.name] = parseJSON(text, field.label); break;
      default: body[field.name] = field.numeric ? Number(text) : text;
    }
  }
  return body;
}

function parseJSON(text, label) {
  try { return JSON.parse(text); } catch { throw new Error(`${label} is not JSON: ${text}`); }
}

/** A report's rows as CSV (RFC 4180: a header line; a field with a comma, quote or line break quoted). */
export function reportCSV(answer) {
  const field = (v) => {
    const text = v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
    return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
  };
  return [answer.columns, ...answer.rows].map((row) => row.map(field).join(",")).join("\r\n");
}

export async function reportsView(main, project, kind, query) {
  const report = REPORTS.find((r) => r.id === kind) || REPORTS[0];
  const values = {};
  for (const field of report.fields) values[field.name] = query.get(field.name) ?? (field.initial ? field.initial() : "");
  const result = h("div.report-result", { "aria-live": "polite" });
  const rollups = h("p.muted.small.rollups");

  const inputs = report.fields.map((field) => {
    const id = `report-${field.name.replaceAll("_", "-")}`;
    let input;
    if (Array.isArray(field.kind)) {
      input = h("select", { id, name: field.name }, field.kind.map((choice) => {
        const [value, label] = Array.isArray(choice) ? choice : [choice, choice];
        return h("option", { value, selected: value === values[field.name] }, label);
      }));
    } else if (field.kind === "lines" || field.kind === "json") {
      input = h("textarea.code", { id, name: field.name, rows: field.kind === "lines" ? 4 : 2, placeholder: field.placeholder, value: values[field.name] });
    } else {
      input = h("input", {
        id, name: field.name, type: field.kind === "day" ? "date" : "text", inputmode: field.kind === "int" ? "numeric" : null,
        placeholder: field.placeholder, value: values[field.name], required: field.required,
      });
    }
    return h(`label.report-field${field.kind === "json" || field.kind === "lines" ? ".wide" : ""}`, h("span", field.label), input);
  });
  const form = h("form.report-form", {
    onsubmit: (event) => {
      event.preventDefault();
      const params = new URLSearchParams();
      for (const field of report.fields) {
        const value = form.elements[field.name].value.trim();
        if (value !== "") params.set(field.name, value);
      }
      const target = `#/p/${seg(project)}/reports/${report.id}?${params.toString().replaceAll("+", "%20")}`;
      // The same query again (a refresh) runs it again; a new one goes through the URL.
      if (location.hash === target) run(Object.fromEntries(params)); else location.hash = target;
    },
  }, inputs, h("div.buttons", h("button.primary", { type: "submit" }, "Run report")));

  // A person's next page: the same query, older than the last row shown.
  function older(next) {
    form.elements.before.value = next;
    form.requestSubmit();
  }

  async function run(asked) {
    let body;
    try {
      body = reportBody(report, asked);
    } catch (error) {
      return clear(result, notice("error", error.message));
    }
    clear(result, h("p.muted", "Running…"));
    const started = performance.now();
    try {
      const answer = await api.post(`/v1/projects/${seg(project)}/reports/${report.id}`, body);
      const took = Math.round(performance.now() - started);
      clear(result,
        h("p.muted.small.report-summary", `${answer.rows.length} ${answer.rows.length === 1 ? "row" : "rows"} in ${took} ms`),
        answer.rows.length === 0 ? empty("No rows: nothing matched in these days.") : draw(report.id, answer, older),
        answer.rows.length === 0 ? null : rowsTable(answer),
        answer.rows.length === 0 ? null : h("div.buttons",
          h("a.button.csv", {
            href: `data:text/csv;charset=utf-8,${encodeURIComponent(reportCSV(answer))}`,
            download: `${project}-${report.id}-${today()}.csv`,
          }, "Download CSV")));
    } catch (error) {
      clear(result, notice("error", error.message));
    }
  }

  clear(main,
    h("h1", `Reports · ${project}`),
    h("nav.tabs", REPORTS.map((r) => h("a", { href: `#/p/${seg(project)}/reports/${r.id}`, "aria-current": r.id === report.id ? "page" : null }, r.title))),
    h("p.muted", report.help, " Days are the project's (its time zone: datongctl timezone)."),
    rollups, form, result);

  api.get("/v1/status").then((status) => {
    const collector = status.services.find((s) => s.name === "collector" && s.metrics);
    const age = collector ? metric(collector.metrics, "datong_report_rollup_age_seconds") : null;
    if (age !== null && age >= 0) clear(rollups, `Trends read rollups the collector keeps; they are ${seconds(age)} behind the stored events.`);
  }).catch(() => {});

  if (report.fields.every((f) => !f.required || (values[f.name] ?? "") !== "")) {
    if ([...query.keys()].length > 0) await run(values);
  }
}

// MARK: The drawings

const PALETTE = ["#1f6feb", "#11763d", "#b54708", "#b42318", "#6941c6", "#0e7090", "#c11574", "#475467"];

function draw(kind, answer, older) {
  const rows = answer.rows.map((row) => Object.fromEntries(answer.columns.map((c, i) => [c, row[i]])));
  if (kind === "trend") return trendChart(rows);
  if (kind === "funnel") return funnelBars(rows);
  if (kind === "retention") return retentionTriangle(rows);
  if (kind === "distribution") return histogram(rows);
  return timeline(rows, older);
}

function text(attrs, content) {
  return Object.assign(svg("text", attrs), { textContent: content });
}

function trendChart(rows) {
  const buckets = [...new Set(rows.map((r) => r.bucket))].sort();
  const series = new Map();
  for (const r of rows) {
    const key = r.group_value === null && rows.every((x) => x.group_value === null) ? r.event : `${r.event} · ${r.group_value ?? "(none)"}`;
    if (!series.has(key)) series.set(key, new Map());
    series.get(key).set(r.bucket, Number(r.value));
  }
  const width = 900, height = 240, left = 56, bottom = 24, top = 10;
  const max = Math.max(1, ...rows.map((r) => Number(r.value)));
  const x = (i) => left + (buckets.length === 1 ? 0.5 : i / (buckets.length - 1)) * (width - left - 12);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const keys = [...series.keys()];
  const lines = keys.map((key, n) => {
    const values = series.get(key);
    const points = buckets.map((b, i) => `${x(i).toFixed(1)},${y(values.get(b) ?? 0).toFixed(1)}`);
    return svg("g", { class: "series-group" },
      svg("polyline", { class: "series", stroke: PALETTE[n % PALETTE.length], points: points.join(" ") }),
      buckets.map((b, i) => svg("circle", { cx: x(i).toFixed(1), cy: y(values.get(b) ?? 0).toFixed(1), r: 2.5, fill: PALETTE[n % PALETTE.length] })));
  });
  const ticks = [0, 0.5, 1].map((f) => svg("g", {},
    svg("line", { class: "grid-line", x1: left, x2: width - 12, y1: y(max * f), y2: y(max * f) }),
    text({ x: left - 6, y: y(max * f) + 4, "text-anchor": "end" }, String(+(max * f).toFixed(2)))));
  const shown = [0, Math.floor((buckets.length - 1) / 2), buckets.length - 1].filter((v, i, a) => a.indexOf(v) === i);
  const labels = shown.map((i) => text({ x: x(i), y: height - 6, "text-anchor": buckets.length === 1 ? "middle" : i === 0 ? "start" : i === buckets.length - 1 ? "end" : "middle" },
    String(buckets[i]).replace("T", " ").replace(/ 00:00:00$/, "")));
  return h("figure.chart.trend-chart",
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `Trend of ${keys.join(", ")}` }, ticks, lines, labels),
    h("figcaption.legend", keys.map((key, n) => h("span", h("span.swatch", { style: { background: PALETTE[n % PALETTE.length] } }), key))));
}

function funnelBars(rows) {
  const groups = [...new Set(rows.map((r) => JSON.stringify(r.group_value)))].map((g) => JSON.parse(g));
  return h("div.funnel", groups.map((group) => {
    const steps = rows.filter((r) => r.group_value === group);
    const first = Math.max(1, steps[0]?.people ?? 1);
    return h("figure.funnel-group",
      groups.length > 1 || group !== null ? h("figcaption", h("strong", group ?? "(none)")) : null,
      steps.map((s, i) => h("div.funnel-step", { dataset: { step: s.step } },
        h("span.funnel-label", `${s.step}. ${s.event}`),
        h("span.funnel-bar", h("span", { style: { width: `${(100 * s.people / first).toFixed(1)}%` } })),
        h("span.funnel-figure", `${s.people} people · ${(100 * Number(s.conversion)).toFixed(1)}%`,
          i > 0 && s.median_seconds !== null ? ` · median ${duration(Number(s.median_seconds))} from step ${i}` : ""))));
  }));
}

function duration(value) {
  if (value < 60) return `${+value.toFixed(1)} s`;
  if (value < 3600) return `${+(value / 60).toFixed(1)} min`;
  if (value < 86400) return `${+(value / 3600).toFixed(1)} h`;
  return `${+(value / 86400).toFixed(1)} d`;
}

function retentionTriangle(rows) {
  const cohorts = [...new Set(rows.map((r) => r.cohort))].sort();
  const periods = Math.max(0, ...rows.map((r) => r.period));
  const cell = new Map(rows.map((r) => [`${r.cohort}/${r.period}`, r]));
  const mode = h("select#retention-mode", { "aria-label": "Count", onchange: () => clear(table, body()) },
    h("option", { value: "returned" }, "came back on period k"), h("option", { value: "returned_within" }, "came back within k periods"));
  const table = h("table.grid.retention-table");
  const body = () => [
    h("thead", h("tr", h("th", "Cohort"), h("th", "People"), Array.from({ length: periods }, (_, k) => h("th", `+${k + 1}`)))),
    h("tbody", cohorts.map((cohort) => {
      const people = rows.find((r) => r.cohort === cohort)?.people ?? 0;
      return h("tr", { dataset: { cohort } }, h("td", cohort), h("td.number", people),
        Array.from({ length: periods }, (_, k) => {
          const r = cell.get(`${cohort}/${k + 1}`);
          const value = r ? r[mode.value] : null;
          if (value === null || value === undefined) return h("td.retention-cell.pending", "");
          const share = people > 0 ? value / people : 0;
          return h("td.retention-cell.number", { style: { background: `rgba(31, 111, 235, ${(0.08 + share * 0.6).toFixed(2)})` }, title: `${value} of ${people}` },
            `${(100 * share).toFixed(1)}%`);
        }));
    })),
  ];
  clear(table, body());
  return h("div.retention", h("label.inline", "Show ", mode), table);
}

function histogram(rows) {
  const width = 900, height = 220, left = 56, bottom = 34, top = 10;
  const max = Math.max(1, ...rows.map((r) => Number(r.people)));
  const slot = (width - left - 12) / rows.length;
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const label = (r) => r.bucket_from === null ? `< ${r.bucket_to}` : r.bucket_to === null ? `≥ ${r.bucket_from}` : `[${r.bucket_from}, ${r.bucket_to})`;
  const bars = rows.map((r, i) => svg("g", { class: "bar" },
    svg("rect", { x: (left + i * slot + slot * 0.1).toFixed(1), y: y(Number(r.people)).toFixed(1), width: (slot * 0.8).toFixed(1), height: (height - bottom - y(Number(r.people))).toFixed(1), fill: PALETTE[0] }),
    text({ x: (left + i * slot + slot / 2).toFixed(1), y: height - 18, "text-anchor": "middle" }, label(r)),
    text({ x: (left + i * slot + slot / 2).toFixed(1), y: (y(Number(r.people)) - 3).toFixed(1), "text-anchor": "middle" }, String(r.people))));
  return h("figure.chart.histogram",
    svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "People per bucket" },
      svg("line", { class: "grid-line", x1: left, x2: width - 12, y1: height - bottom, y2: height - bottom }), bars),
    h("figcaption.muted.small", "people per bucket"));
}

function timeline(rows, older) {
  const last = rows[rows.length - 1];
  return h("div.timeline",
    h("ol.timeline-list", rows.map((r) => h("li", { dataset: { event: r.event } },
      h("time", { datetime: r.time }, formatTime(new Date(r.time))),
      h("strong", r.event),
      h("span.muted", ` ${r.lib ?? ""}${r.hybrid_h5 ? " · H5 in app" : ""} · ${r.distinct_id} · user ${r.stored_user_id ?? "—"}`),
      h("details", h("summary", "properties"), h("pre.code", JSON.stringify(r.properties, null, 2)))))),
    last?.next ? h("div.buttons", h("button", { type: "button", onclick: () => older(last.next) }, "Older events")) : null);
}

function rowsTable(answer) {
  const cellText = (v) => (v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));
  return h("details.report-rows", h("summary", answer.rows.length === 1 ? "The row" : `The ${answer.rows.length} rows`),
    h("table.grid.report-table",
      h("thead", h("tr", answer.columns.map((c) => h("th", c)))),
      h("tbody", answer.rows.slice(0, 1000).map((row) => h("tr", row.map((v) => h("td", cellText(v)))))),
    answer.rows.length > 1000 ? h("p.muted.small", "The first 1000 rows; the CSV has them all.") : null));
}
