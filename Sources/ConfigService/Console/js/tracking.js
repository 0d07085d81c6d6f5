// The codeless-tracking table as four editable tables: each identifier with the fixed
// values it reports (userDefined) and the values read at run time (pagePara). Publishing shows
// every problem config-service finds next to the field its JSON Pointer names.
import { api, seg } from "./api.js";
import { h, clear, notice, pretty } from "./dom.js";
import { scopeControls, loadLatest, renderHistory, problemList } from "./documents.js";

const SECTIONS = [
  { name: "ACTION", label: "Taps (ACTION)", example: "ViewController/jumpSecond or ViewController/buttonTapped:/3" },
  { name: "PAGEPV", label: "Page views (PAGEPV)", example: "ProductViewController" },
  { name: "TABLEVIEW", label: "List rows (TABLEVIEW)", example: "ListDelegate/UITableView/0" },
  { name: "GESTURE", label: "Gestures (GESTURE)", example: "ViewController/handleTap:" },
];

/** A JSON Pointer token (RFC 6901). */
const token = (key) => key.replaceAll("~", "~0").replaceAll("/", "~1");

/** The editor's model of a published table: per section, a list of entries. */
function modelOf(document) {
  const model = {};
  for (const { name } of SECTIONS) {
    model[name] = Object.entries(document?.[name] ?? {}).map(([id, entry]) => ({
      id,
      userDefined: Object.entries(entry?.userDefined ?? {}).map(([key, value]) => ({ key, value: String(value) })),
      pagePara: Object.entries(entry?.pagePara ?? {}).map(([key, p]) => ({
        key, propertyName: p?.propertyName ?? "", propertyPath: p?.propertyPath ?? "", containIn: String(p?.containIn ?? "0"),
      })),
    }));
  }
  return model;
}

export async function trackingView(main, project) {
  const kind = "tracking-table";
  let model = modelOf({});
  const sections = h("div.sections");
  const status = h("div.status", { "aria-live": "polite" });
  const raw = h("pre.code.raw");
  const history = h("section.history");
  const scope = scopeControls(kind, () => load());

  /** The document the tables describe; each input learns the JSON Pointer of what it holds. */
  function build() {
    const document = {};
    for (const { name } of SECTIONS) {
      if (model[name].length === 0) continue;
      const section = (document[name] = {});
      for (const entry of model[name]) {
        const path = `/${name}/${token(entry.id)}`;
        entry.inputs.id.dataset.path = path;
        const userDefined = {};
        for (const pair of entry.userDefined) {
          pair.inputs.key.dataset.path = `${path}/userDefined/${token(pair.key)}#key`;
          pair.inputs.value.dataset.path = `${path}/userDefined/${token(pair.key)}`;
          userDefined[pair.key] = pair.value;
        }
        const pagePara = {};
        for (const p of entry.pagePara) {
          const at = `${path}/pagePara/${token(p.key)}`;
          p.inputs.key.dataset.path = at;
          p.inputs.propertyName.dataset.path = `${at}/propertyName`;
          p.inputs.propertyPath.dataset.path = `${at}/propertyPath`;
          p.inputs.containIn.dataset.path = `${at}/containIn`;
          pagePara[p.key] = { propertyName: p.propertyName, propertyPath: p.propertyPath, containIn: p.containIn };
        }
        section[entry.id] = { userDefined, pagePara };
      }
    }
    raw.textContent = pretty(document);
    return document;
  }

  /** Problems the editor sees before asking the server: identifiers or keys given twice are lost in JSON. */
  function duplicates() {
    const problems = [];
    for (const { name } of SECTIONS) {
      const seen = new Set();
      for (const entry of model[name]) {
        if (seen.has(entry.id)) problems.push({ element: entry.inputs.id, message: `'${entry.id}' is listed twice in ${name}` });
        seen.add(entry.id);
        for (const [list, what] of [[entry.userDefined, "value"], [entry.pagePara, "parameter"]]) {
          const keys = new Set();
          for (const item of list) {
            if (keys.has(item.key)) problems.push({ element: item.inputs.key, message: `the ${what} '${item.key}' is given twice` });
            keys.add(item.key);
          }
        }
      }
    }
    return problems;
  }

  function clearMarks() {
    for (const el of sections.querySelectorAll(".field-error")) el.remove();
    for (const el of sections.querySelectorAll("[aria-invalid]")) { el.removeAttribute("aria-invalid"); el.classList.remove("invalid"); }
  }

  function mark(element, message) {
    element.classList.add("invalid");
    element.setAttribute("aria-invalid", "true");
    const note = h("span.field-error", { role: "alert" }, message);
    element.insertAdjacentElement("afterend", note);
  }

  /** Puts each problem next to the field at its path (or the nearest field above it); returns the rest. */
  function showProblems(problems) {
    const unplaced = [];
    for (const problem of problems) {
      let path = problem.path;
      let element = null;
      while (path && !element) {
        element = sections.querySelector(`[data-path="${CSS.escape(path)}"]`);
        if (!element) path = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
      }
      if (element) mark(element, problem.message);
      else unplaced.push(problem);
    }
    return unplaced;
  }

  async function publish() {
    clear(status);
    clearMarks();
    const document = build();
    const local = duplicates();
    if (local.length) {
      for (const p of local) mark(p.element, p.message);
      status.append(notice("error", `Not published: ${local.length} problem(s), shown at their fields.`));
      return;
    }
    try {
      const result = await api.put(`/v1/projects/${seg(project)}/${kind}`, document, scope.publish);
      scope.clearNote();
      await load();
      status.append(notice("ok", `Published as version ${result.version}.`));
    } catch (error) {
      status.append(notice("error", error.problems?.length ? `Not published: ${error.problems.length} problem(s), shown at their fields.` : error.message));
      const rest = showProblems(error.problems ?? []);
      if (rest.length) status.append(problemList(rest));
      sections.querySelector(".invalid")?.focus();
    }
  }

  function input(item, field, attrs = {}) {
    const el = h("input", { value: item[field], ...attrs, oninput: () => { item[field] = el.value; build(); } });
    item.inputs ??= {};
    item.inputs[field] = el;
    return el;
  }

  function renderEntry(section, entry) {
    entry.inputs = {};
    const remove = (list, item) => () => { list.splice(list.indexOf(item), 1); render(); };
    const values = h("div.pairs", entry.userDefined.map((pair) => {
      pair.inputs = {};
      return h("div.pair",
        input(pair, "key", { placeholder: "property", "aria-label": "Property name", size: 12 }),
        input(pair, "value", { placeholder: "value", "aria-label": "Property value", size: 12 }),
        h("button.icon", { type: "button", title: "Remove this value", "aria-label": "Remove this value", onclick: remove(entry.userDefined, pair) }, "×"));
    }), h("button.link", { type: "button", onclick: () => { entry.userDefined.push({ key: "", value: "" }); render(); } }, "+ value"));
    const parameters = h("div.pairs", entry.pagePara.map((p) => {
      p.inputs = {};
      const containIn = h("select", { "aria-label": "Read from", onchange: () => { p.containIn = containIn.value; build(); } },
        h("option", { value: "0", selected: p.containIn === "0" }, "target"),
        h("option", { value: "1", selected: p.containIn === "1" }, "tapped cell"));
      p.inputs.containIn = containIn;
      return h("div.pair",
        input(p, "key", { placeholder: "upload key", "aria-label": "Upload key", size: 11 }),
        input(p, "propertyName", { placeholder: "propertyName", "aria-label": "propertyName", size: 11 }),
        input(p, "propertyPath", { placeholder: "propertyPath", "aria-label": "propertyPath", size: 11 }),
        containIn,
        h("button.icon", { type: "button", title: "Remove this parameter", "aria-label": "Remove this parameter", onclick: remove(entry.pagePara, p) }, "×"));
    }), h("button.link", { type: "button", onclick: () => { entry.pagePara.push({ key: "", propertyName: "", propertyPath: "", containIn: "0" }); render(); } }, "+ parameter"));
    return h("tr",
      h("td", input(entry, "id", { "aria-label": `${section.name} identifier`, placeholder: section.example, size: 30, class: "identifier" })),
      h("td", values), h("td", parameters),
      h("td", h("button.link.danger", { type: "button", onclick: remove(model[section.name], entry) }, "Remove")));
  }

  function render() {
    clear(sections, SECTIONS.map((section) => h("section.tracking-section", { dataset: { section: section.name } },
      h("div.section-head",
        h("h2", section.label, h("span.count", String(model[section.name].length))),
        h("button.add", { type: "button", onclick: () => { model[section.name].push({ id: "", userDefined: [], pagePara: [] }); render(); sections.querySelector(`[data-section="${section.name}"] tbody tr:last-child input`)?.focus(); } }, `+ Add ${section.name} entry`)),
      model[section.name].length
        ? h("table.grid.entries",
            h("thead", h("tr", h("th", "Identifier"), h("th", "userDefined (fixed values)"), h("th", "pagePara (read at run time)"), h("th", ""))),
            h("tbody", model[section.name].map((entry) => renderEntry(section, entry))))
        : h("p.empty", "No entries."),
    )));
    build();
  }

  async function load() {
    clear(status);
    const { latest, versions } = await loadLatest(project, kind, scope.address);
    model = modelOf(latest?.body);
    render();
    if (!latest) status.append(notice("info", "No tracking table is published for this platform/app yet. Add entries and publish."));
    else status.append(notice("info", `Editing version ${latest.version}, the newest.`));
    renderHistory(history, versions, project, kind, scope, load);
  }

  clear(main,
    h("h1", `Tracking table · ${project}`),
    h("p.muted", "What the app reports without code: taps, page views, list rows and gestures, each with fixed values and values read from the screen."),
    scope.element,
    sections,
    h("div.buttons", h("button.primary#publish", { type: "button", onclick: publish }, "Publish")),
    status,
    h("details.raw-view", h("summary", "JSON that will be published"), raw),
    history,
  );
  await load();
}
