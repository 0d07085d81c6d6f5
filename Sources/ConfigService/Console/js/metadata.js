// Metadata of a project: the catalog the collector keeps while storing (docs/ANALYTICS.md "The
// catalog"): its events with their volumes and SDKs, its properties with their Sensors types, the
// records refused for a value of another type (replayable), the properties sent with another type
// than their own, and a property's type changed after a preview of what it does to stored rows.
import { api, seg } from "./api.js";
import { h, clear, notice, empty } from "./dom.js";

export async function metadataView(main, project) {
  const events = h("div.catalog-events");
  const properties = h("div.catalog-properties");
  const conflicts = h("div.catalog-conflicts");
  const refusals = h("div.type-refusals");
  const refusalStatus = h("div.status", { "aria-live": "polite" });
  const status = h("div.status", { "aria-live": "polite" });
  const typeProperty = h("select#type-property", { "aria-label": "Property" });
  const typeChoice = h("select#type-choice", { "aria-label": "Type" },
    ["NUMBER", "BOOL", "STRING", "LIST", "DATETIME", "DATE"].map((t) => h("option", { value: t }, t)));
  const typeStatus = h("div.type-status", { "aria-live": "polite" });
  const drops = h("div.dropped-properties");
  const undeclared = h("div.undeclared-events");
  const rules = h("p.rules-now");
  const rulesStatus = h("div.rules-status", { "aria-live": "polite" });
  const strictChoice = h("select#strict-choice", { "aria-label": "Strict validation" },
    h("option", { value: "off" }, "any event and property"), h("option", { value: "on" }, "declared events and properties only"));
  const wrongChoice = h("select#wrong-type-choice", { "aria-label": "A value of another type" },
    h("option", { value: "refuse" }, "refuses the record"), h("option", { value: "drop_property" }, "drops only the property"));
  const base = `/v1/projects/${seg(project)}`;
  const filter = h("input#metadata-filter", { type: "search", placeholder: "filter by name", "aria-label": "Filter by name", size: 24 });
  let catalog = null;

  function show() {
    const text = filter.value.trim().toLowerCase();
    const matches = (name) => !text || (name ?? "").toLowerCase().includes(text);
    const shownEvents = catalog.events.filter((e) => matches(e.name) || matches(e.displayName) || e.properties.some((p) => matches(p.name)));
    const shownProperties = catalog.properties.filter((p) => matches(p.name) || matches(p.displayName) || p.events.some(matches));
    const mixed = catalog.properties.filter((p) => p.conflicts.length > 0);
    const refused = catalog.typeRefusals ?? [];

    clear(refusals, refused.length === 0
      ? h("p.muted", "No record was refused for a value of another type in the last 30 days.")
      : h("table.grid.refusals-table",
        h("thead", h("tr", ["Day (UTC)", "Property", "Its type", "Sent as", "Records"].map((t) => h("th", t)))),
        h("tbody", refused.map((r) => h("tr", { dataset: { property: r.property } },
          h("td", r.day), h("td", h("code", r.property)), h("td", typeBadge(r.type)), h("td", typeBadge(r.sentType)),
          h("td.number", r.records.toLocaleString()))))));

    const dropped = catalog.drops ?? [];
    clear(drops, dropped.length === 0 ? null
      : h("table.grid.drops-table",
        h("thead", h("tr", ["Day (UTC)", "Property", "Kind", "Why", "Records"].map((t) => h("th", t)))),
        h("tbody", dropped.map((d) => h("tr", { dataset: { property: d.property } },
          h("td", d.day), h("td", h("code", d.property)), h("td", d.kind),
          h("td", d.reason === "undeclared" ? "not declared" : "another type"), h("td.number", d.count.toLocaleString()))))));

    const refusedEvents = catalog.undeclaredEvents ?? [];
    clear(undeclared, refusedEvents.length === 0 ? null
      : h("table.grid.undeclared-table",
        h("thead", h("tr", ["Day (UTC)", "Event refused as not declared", "Records", ""].map((t) => h("th", t)))),
        h("tbody", refusedEvents.map((u) => h("tr", { dataset: { event: u.event } },
          h("td", u.day), h("td", h("code", u.event)), h("td.number", u.records.toLocaleString()),
          h("td", h("button.small", { type: "button", dataset: { declare: u.event }, onclick: () => declare([u.event]) }, "Declare")))))));

    const settings = catalog.settings ?? { strict: false, wrongType: "refuse" };
    strictChoice.value = settings.strict ? "on" : "off";
    wrongChoice.value = settings.wrongType;
    const declared = catalog.declaredEvents ?? [];
    clear(rules, settings.strict ? "Strict: only declared events and properties are stored. " : "Any event and property is stored. ",
      settings.wrongType === "refuse" ? "A value of another type refuses its record. " : "A value of another type is left out of its record. ",
      `${declared.length} events declared.`);

    const chosen = typeProperty.value;
    clear(typeProperty, catalog.properties.map((p) => h("option", { value: `${p.kind}:${p.name}` }, `${p.name} (${p.kind}, ${p.type})`)));
    if (chosen) typeProperty.value = chosen;

    clear(conflicts, mixed.length === 0
      ? h("p.muted", "Every property has been sent with one type only.")
      : h("table.grid.conflicts-table",
        h("thead", h("tr", ["Property", "Its type", "Sent as", "In events"].map((t) => h("th", t)))),
        h("tbody", mixed.map((p) => h("tr", { dataset: { property: p.name } },
          h("td", h("code", p.name)), h("td", typeBadge(p.type)),
          h("td", [...new Set(p.conflicts.map((c) => c.type))].map(typeBadge)),
          h("td", p.conflicts.map((c) => c.name).join(", ")))))));

    clear(events, shownEvents.length === 0 ? empty(catalog.events.length === 0 ? "No events stored yet." : "No event matches.")
      : h("table.grid.events-catalog",
        h("thead", h("tr", ["Event", "Stored", "First day", "Last day", "Libs", "App versions", "Properties", "Analysts"].map((t) => h("th", t)))),
        h("tbody", shownEvents.map((e) => h("tr", { dataset: { event: e.name } },
          h("td", { title: e.description ?? null }, h("strong", e.name), named(e)), h("td.number", e.count.toLocaleString()), h("td", e.firstDay), h("td", e.lastDay),
          h("td", e.libs.join(", ") || "—"), h("td", e.appVersions.join(", ") || "—"),
          h("td", h("details", h("summary", `${new Set(e.properties.map((p) => p.name)).size}`),
            h("ul.plain", e.properties.map((p) => h("li", h("code", p.name), " ", typeBadge(p.type)))))),
          h("td", hideToggle("event", e)))))));

    clear(properties, shownProperties.length === 0 ? empty(catalog.properties.length === 0 ? "No properties stored yet." : "No property matches.")
      : h("table.grid.properties-catalog",
        h("thead", h("tr", ["Property", "Kind", "Type", "Events", "First day", "Last day", "Sample", "Analysts"].map((t) => h("th", t)))),
        h("tbody", shownProperties.map((p) => h("tr", { dataset: { property: p.name, kind: p.kind } },
          h("td", { title: p.description ?? null }, h("code", p.name), named(p)), h("td", p.kind), h("td", typeBadge(p.type), p.conflicts.length ? h("span.badge.warn", "another type seen") : null),
          h("td", p.kind === "profile" ? "—" : p.events.join(", ")), h("td", p.firstDay), h("td", p.lastDay),
          h("td.id", h("code", p.sample)), h("td", hideToggle(`${p.kind}_property`, p)))))));
  }

  async function refresh() {
    try {
      catalog = await api.get(`/v1/projects/${seg(project)}/metadata`);
      show();
      clear(status, h("p.muted.small", `${catalog.events.length} events, ${catalog.properties.length} properties`));
    } catch (error) {
      clear(status, notice("error", error.message));
    }
  }

  /** Whether analysts see an entry, and the button that changes it (the note's texts stay). */
  function hideToggle(kind, entry) {
    const label = entry.hidden ? "Show" : "Hide";
    return [entry.hidden ? h("span.badge.warn.hidden-badge", "hidden from analysts") : null,
      h("button.small", { type: "button", dataset: { hide: entry.name }, onclick: async () => {
        const note = { kind, name: entry.name, displayName: entry.displayName ?? "", description: entry.description ?? "", hidden: !entry.hidden };
        try {
          await api.put(`${base}/metadata/notes`, [note]);
          await refresh();
        } catch (error) {
          clear(status, notice("error", error.message));
        }
      } }, label)];
  }

  /** The property and type chosen, as the API takes them. */
  function typeChange() {
    const [kind, ...name] = typeProperty.value.split(":");
    return { kind, name: name.join(":"), type: typeChoice.value };
  }

  function rows(report) {
    return `${report.storedRows.toLocaleString()} stored rows carry it, ${report.unreadableRows.toLocaleString()} of them do not read as ${report.type}`;
  }

  async function previewType() {
    if (!typeProperty.value) return;
    try {
      const report = await api.post(`${base}/metadata/types/preview`, typeChange());
      const before = report.previous ? `is ${report.previous}` : "has no type";
      clear(typeStatus, notice("info", `${report.name} ${before}; as ${report.type}: ${rows(report)}.`),
        h("button#apply-type", { type: "button", onclick: () => applyType(report) }, `Set ${report.name} to ${report.type}`));
    } catch (error) {
      clear(typeStatus, notice("error", error.message));
    }
  }

  async function applyType(preview) {
    if (!confirm(`Set ${preview.kind} property ${preview.name} to ${preview.type}? Every later value is checked against it; ${rows(preview)}.`)) return;
    try {
      const report = await api.put(`${base}/metadata/types`, { kind: preview.kind, name: preview.name, type: preview.type });
      clear(typeStatus, notice("ok", `${report.name} is ${report.type} now (was ${report.previous ?? "untyped"}).`));
      await refresh();
    } catch (error) {
      clear(typeStatus, notice("error", error.message));
    }
  }

  async function declareSeen() {
    if (!confirm("Declare every event and property seen so far, each property with its type now?")) return;
    await declare([], true);
  }

  /** Declares `events` (and with `seen` everything the catalog has); replay stores their refused records. */
  async function declare(events, seen = false) {
    try {
      const made = await api.post(`${base}/metadata/declarations`, { events, seen });
      clear(rulesStatus, notice("ok", `${made.events} events and ${made.properties} properties declared.`));
      await refresh();
    } catch (error) {
      clear(rulesStatus, notice("error", error.message));
    }
  }

  async function saveRules() {
    const settings = { strict: strictChoice.value === "on", wrongType: wrongChoice.value };
    if (settings.strict && !confirm("Store declared events and properties only? Undeclared events are refused and undeclared properties left out.")) return;
    try {
      const saved = await api.put(`${base}/metadata/settings`, settings);
      clear(rulesStatus, notice("ok", `Saved: strict ${saved.strict ? "on" : "off"}, a value of another type ${saved.wrongType === "refuse" ? "refuses the record" : "drops the property"}.`));
      await refresh();
    } catch (error) {
      clear(rulesStatus, notice("error", error.message));
    }
  }

  async function replay() {
    if (!confirm("Write the refused records again, checked against the types as they are now? Those that still do not fit are kept, refused again.")) return;
    const total = { replayed: 0, stored: 0, duplicates: 0, refused: 0 };
    let request = { after: 0, limit: 1000 };
    try {
      for (;;) {
        const answer = await api.post(`${base}/rejected/replay`, request);
        for (const key of Object.keys(total)) total[key] += answer[key];
        if (answer.next == null) break;
        request = { after: answer.next, before: answer.before, limit: 1000 };
      }
      clear(refusalStatus, notice("ok", `${total.replayed} records replayed: ${total.stored} stored, ${total.duplicates} stored before, ${total.refused} refused again.`));
      await refresh();
    } catch (error) {
      clear(refusalStatus, notice("error", error.message));
    }
  }

  filter.addEventListener("input", () => { if (catalog) show(); });
  clear(main,
    h("h1", `Metadata · ${project}`),
    h("p.muted", "What this project sends, as the collector catalogued it while storing: a property's type is the Sensors type of its first value, or the one set here, and every value is checked against it. Analysts read the same in analytics.catalog_events, analytics.catalog_properties and analytics.type_refusals."),
    h("div.toolbar", filter, h("button", { type: "button", onclick: refresh }, "Refresh"), status),
    h("section", h("h2", "Records refused for their types"),
      h("p.muted.small", "A value that does not fit its property's type (a text for a NUMBER, a number for a LIST) refuses its record with PROPERTY_WITH_WRONG_TYPE; analytics.rejected keeps the records. Fix the type or the instrumentation, then replay them."),
      h("div.toolbar", h("button#replay-refused", { type: "button", onclick: replay }, "Replay refused records…"), refusalStatus),
      refusals),
    h("section", h("h2", "Validation"),
      rules,
      h("div.toolbar", h("label", "Store ", strictChoice), h("label", "A value of another type ", wrongChoice),
        h("button#save-rules", { type: "button", onclick: saveRules }, "Save rules"),
        h("button#declare-seen", { type: "button", onclick: declareSeen }, "Declare everything seen…")),
      rulesStatus,
      undeclared,
      h("p.muted.small", "Properties left out of stored records in the last 30 days (analytics.dropped_properties):"),
      drops),
    h("section", h("h2", "Change a property's type"),
      h("p.muted.small", "The preview counts the stored rows that carry the property and those that do not read as the new type; stored rows are not rewritten. Numbers and booleans sent for a STRING property are stored as their text."),
      h("div.toolbar", typeProperty, typeChoice, h("button#preview-type", { type: "button", onclick: previewType }, "Preview")),
      typeStatus),
    h("section", h("h2", "Properties sent with another type"),
      h("p.muted.small", "Values of another type than the property's that were stored: converted to text for a STRING property, or stored before the type was set. Read such properties with analytics.as_number(properties, 'name') and its siblings, which give NULL for a value of another type."),
      conflicts),
    h("section", h("h2", "Events"), events),
    h("section", h("h2", "Properties"), properties),
  );
  await refresh();
  return null;
}

/** The display name the data team gave an entry (datongctl metadata import), under its name. */
function named(entry) {
  return entry.displayName ? h("div.muted.small.display-name", entry.displayName) : null;
}

function typeBadge(type) {
  return h(`span.badge.type.${type.toLowerCase()}`, type);
}
