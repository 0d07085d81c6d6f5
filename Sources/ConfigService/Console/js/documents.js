// Documents: the scope a document is published for, the JSON editor of the kinds without a table
// editor, and, for every kind, the version history with a side-by-side diff and rollback.
import { api, seg, ApiError } from "./api.js";
import { h, clear, notice, time, empty, pretty } from "./dom.js";

export const KINDS = [
  { id: "remote-config", label: "Remote config", hint: "What SDKs fetch as their remote configuration (configs, per-platform switches)." },
  { id: "visual-config", label: "Visual config", hint: "Codeless property configuration for the visual tool." },
  { id: "server-url-whitelist", label: "Server URL whitelist", hint: "Server URLs an H5 page may report to through the app.", whitelist: true },
  { id: "h5-domain-whitelist", label: "H5 domain whitelist", hint: "Domains whose pages the app relays.", whitelist: true },
  { id: "app-links", label: "App links", hint: "The route table and its Universal Links / App Links files." },
];

/** Where a document is published: platform, app id and, except for whitelists, app versions. */
export function scopeControls(kind, onChange) {
  const whitelist = KINDS.find((k) => k.id === kind)?.whitelist;
  const platform = h("select#scope-platform", { name: "platform" },
    h("option", { value: "" }, "all platforms"), h("option", { value: "ios" }, "iOS"),
    h("option", { value: "android" }, "Android"), h("option", { value: "web" }, "Web"));
  const appID = h("input#scope-app", { name: "app_id", maxlength: 128, placeholder: "all apps", size: 18 });
  const min = h("input#scope-min", { name: "min_app_version", placeholder: "any", size: 8, pattern: "\\d+(\\.\\d+){0,3}" });
  const max = h("input#scope-max", { name: "max_app_version", placeholder: "any", size: 8, pattern: "\\d+(\\.\\d+){0,3}" });
  const note = h("input#publish-note", { name: "note", maxlength: 200, placeholder: "what changed", size: 28 });
  platform.addEventListener("change", onChange);
  appID.addEventListener("change", onChange);
  const element = h("fieldset.scope", h("legend", "Published for"),
    h("label", "Platform ", platform), h("label", "App id ", appID),
    whitelist ? null : h("label", "From app version ", min), whitelist ? null : h("label", "to ", max),
    h("label", "Note ", note));
  return {
    element,
    /** Parameters that address the document (reads and writes). */
    get address() { return { platform: platform.value, app_id: appID.value }; },
    /** Parameters of a publish. */
    get publish() { return { ...this.address, min_app_version: min.value, max_app_version: max.value, note: note.value }; },
    clearNote() { note.value = ""; },
  };
}

/** A document's versions, newest first (empty when none is published). */
async function listVersions(project, kind, address) {
  try {
    return await api.get(`/v1/projects/${seg(project)}/${kind}/versions`, address);
  } catch (error) {
    if (error instanceof ApiError && error.code === "no_document") return [];
    throw error;
  }
}

/** The newest published version of a document (null when none is), and the list of versions. */
export async function loadLatest(project, kind, address) {
  const versions = await listVersions(project, kind, address);
  if (versions.length === 0) return { latest: null, versions };
  const newest = versions[0];
  const body = await api.get(`/v1/projects/${seg(project)}/${kind}/versions/${newest.version}`, address);
  return { latest: { version: newest.version, body }, versions };
}

/** The problems of a refused publish, as a list (each at its JSON Pointer). */
export function problemList(problems) {
  return h("ul.problems", problems.map((p) => h("li", h("code", p.path || "(document)"), " ", p.message)));
}

export async function documentView(main, project, kind) {
  const info = KINDS.find((k) => k.id === kind);
  const status = h("div.status", { "aria-live": "polite" });
  const editor = h("textarea#document-json.code", { spellcheck: "false", rows: 18, "aria-label": `${info.label} JSON` });
  const history = h("section.history");
  const scope = scopeControls(kind, () => load());

  async function load() {
    clear(status);
    const { latest, versions } = await loadLatest(project, kind, scope.address);
    editor.value = latest ? pretty(latest.body) : info.whitelist ? "[\n]" : "{\n}";
    if (!latest) status.append(notice("info", `No ${info.label.toLowerCase()} is published for this platform/app yet.`));
    renderHistory(history, versions, project, kind, scope, load);
  }

  async function send(validateOnly) {
    clear(status);
    try {
      JSON.parse(editor.value);
    } catch (error) {
      return status.append(notice("error", `Not JSON: ${error.message}`));
    }
    try {
      if (validateOnly) {
        await api.post(`/v1/projects/${seg(project)}/${kind}/validate`, editor.value);
        status.append(notice("ok", "The document is valid."));
      } else {
        const result = await api.put(`/v1/projects/${seg(project)}/${kind}`, editor.value, scope.publish);
        scope.clearNote();
        await load();
        status.append(notice("ok", `Published as version ${result.version}.`));
      }
    } catch (error) {
      status.append(notice("error", error.message));
      if (error.problems?.length) status.append(problemList(error.problems));
    }
  }

  clear(main,
    h("h1", `${info.label} · ${project}`),
    h("nav.tabs", KINDS.map((k) => h("a", { href: `#/p/${seg(project)}/documents/${k.id}`, "aria-current": k.id === kind ? "page" : null }, k.label))),
    h("p.muted", info.hint),
    scope.element,
    editor,
    h("div.buttons",
      h("button", { type: "button", onclick: () => send(true) }, "Validate"),
      h("button.primary", { type: "button", onclick: () => send(false) }, "Publish")),
    status,
    history,
  );
  await load();
}

/** The version history of a document: pick two versions to compare, roll back to any. */
export function renderHistory(container, versions, project, kind, scope, reload) {
  const diffArea = h("div.diff-area");
  if (versions.length === 0) return clear(container, h("h2", "History"), empty("No versions yet."));
  const from = h("select#diff-from", { "aria-label": "Compare from version" }, versions.map((v, i) => h("option", { value: v.version, selected: i === 1 }, `v${v.version}`)));
  const to = h("select#diff-to", { "aria-label": "Compare to version" }, versions.map((v, i) => h("option", { value: v.version, selected: i === 0 }, `v${v.version}`)));
  const rows = versions.map((v, i) => h("tr", { dataset: { version: v.version } },
    h("td", `v${v.version}`, i === 0 ? h("span.badge", "newest") : null),
    h("td", time(v.publishedAt)),
    h("td", v.note ?? ""),
    h("td", v.minAppVersion || v.maxAppVersion ? `${v.minAppVersion ?? "any"} – ${v.maxAppVersion ?? "any"}` : "all"),
    h("td", h("code.etag", { title: v.etag }, v.etag.replaceAll('"', "").slice(0, 12))),
    h("td", i === 0 ? "" : h("button.rollback", {
      type: "button",
      onclick: async () => {
        if (!confirm(`Publish version ${v.version} again as the newest version of the ${kind}?`)) return;
        try {
          const result = await api.post(`/v1/projects/${seg(project)}/${kind}/rollback`, undefined, { ...scope.address, to: v.version });
          await reload();
          container.prepend(notice("ok", `Rolled back: version ${v.version} is published again as version ${result.version}.`));
        } catch (error) {
          container.prepend(notice("error", error.message));
        }
      },
    }, `Roll back to v${v.version}`)),
  ));
  clear(container,
    h("h2", "History"),
    h("table.grid.versions", h("thead", h("tr", ["Version", "Published", "Note", "App versions", "ETag", ""].map((t) => h("th", t)))), h("tbody", rows)),
    versions.length > 1
      ? h("div.inline", h("label", "Compare ", from), h("label", " with ", to),
          h("button#diff-button", { type: "button", onclick: () => showDiff(diffArea, project, kind, scope.address, +from.value, +to.value) }, "Show diff"))
      : null,
    diffArea);
}

async function showDiff(area, project, kind, address, from, to) {
  clear(area, h("p.muted", "Loading…"));
  const base = `/v1/projects/${seg(project)}/${kind}`;
  const [old, neu, diff] = await Promise.all([
    api.get(`${base}/versions/${from}`, address), api.get(`${base}/versions/${to}`, address),
    api.get(`${base}/diff`, { ...address, from, to }),
  ]);
  const changes = diff.changes.length
    ? h("ul.changes", diff.changes.map((c) => h(`li.${c.op}`, h("strong", c.op), " ", h("code", c.path),
        "from" in c ? h("span.old", " ", JSON.stringify(c.from)) : null, "to" in c ? h("span.new", " → ", JSON.stringify(c.to)) : null)))
    : empty("The two versions are the same.");
  clear(area, h("h3", `v${from} → v${to}: ${diff.changes.length} change(s)`), changes, sideBySide(pretty(old).split("\n"), pretty(neu).split("\n"), from, to));
}

/** Two columns of lines, changed lines marked and a changed line shown beside its new form (a line
 * diff by longest common subsequence). */
export function sideBySide(left, right, leftName, rightName) {
  const table = h("table.side-by-side",
    h("colgroup", h("col.num"), h("col"), h("col.num"), h("col")),
    h("thead", h("tr", h("th", { colspan: 2 }, `v${leftName}`), h("th", { colspan: 2 }, `v${rightName}`))));
  const body = h("tbody");
  table.append(body);
  const n = left.length, m = right.length;
  if (n * m > 4_000_000) {
    body.append(h("tr", h("td", { colspan: 4 }, "The documents are too long to show side by side; the list of changes above is complete.")));
    return table;
  }
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * width + j] = left[i] === right[j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  // Runs of removed lines followed by added lines are shown side by side, row by row.
  let removed = [], added = [];
  const flush = () => {
    for (let k = 0; k < Math.max(removed.length, added.length); k++) body.append(row(removed[k], added[k]));
    removed = []; added = [];
  };
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && left[i] === right[j]) { flush(); body.append(row({ at: i + 1, text: left[i] }, { at: j + 1, text: right[j] }, true)); i++; j++; }
    else if (j < m && (i >= n || lcs[i * width + j + 1] >= lcs[(i + 1) * width + j])) { added.push({ at: j + 1, text: right[j] }); j++; }
    else { removed.push({ at: i + 1, text: left[i] }); i++; }
  }
  flush();
  return table;
}

function row(l, r, same = false) {
  return h("tr",
    h("td.num", l?.at ?? ""), h(`td.line${!same && l ? ".del" : ""}`, l?.text ?? ""),
    h("td.num", r?.at ?? ""), h(`td.line${!same && r ? ".ins" : ""}`, r?.text ?? ""));
}
