// Metadata of a project: the catalog the collector keeps while storing (docs/ANALYTICS.md "The
// catalog"): its events with their volumes and SDKs, its properties with their Sensors types, and
// the properties sent with another type than their own.
import { api, seg } from "./api.js";
import { h, clear, notice, empty } from "./dom.js";

export async function metadataView(main, project) {
  const events = h("div.catalog-events");
  const properties = h("div.catalog-properties");
  const conflicts = h("div.catalog-conflicts");
  const status = h("div.status", { "aria-live": "polite" });
  const filter = h("input#metadata-filter", { type: "search", placeholder: "filter by name", "aria-label": "Filter by name", size: 24 });
  let catalog = null;

  function show() {
    const text = filter.value.trim().toLowerCase();
    const matches = (name) => !text || (name ?? "").toLowerCase().includes(text);
    const shownEvents = catalog.events.filter((e) => matches(e.name) || matches(e.displayName) || e.properties.some((p) => matches(p.name)));
    const shownProperties = catalog.properties.filter((p) => matches(p.name) || matches(p.displayName) || p.events.some(matches));
    const mixed = catalog.properties.filter((p) => p.conflicts.length > 0);

    clear(conflicts, mixed.length === 0
      ? h("p.muted", "Every property has been sent with one type only.")
      : h("table.grid.conflicts-table",
        h("thead", h("tr", ["Property", "Its type (first value)", "Sent as", "In events"].map((t) => h("th", t)))),
        h("tbody", mixed.map((p) => h("tr", { dataset: { property: p.name } },
          h("td", h("code", p.name)), h("td", typeBadge(p.type)),
          h("td", [...new Set(p.conflicts.map((c) => c.type))].map(typeBadge)),
          h("td", p.conflicts.map((c) => c.name).join(", ")))))));

    clear(events, shownEvents.length === 0 ? empty(catalog.events.length === 0 ? "No events stored yet." : "No event matches.")
      : h("table.grid.events-catalog",
        h("thead", h("tr", ["Event", "Stored", "First day", "Last day", "Libs", "App versions", "Properties"].map((t) => h("th", t)))),
        h("tbody", shownEvents.map((e) => h("tr", { dataset: { event: e.name } },
          h("td", { title: e.description ?? null }, h("strong", e.name), named(e)), h("td.number", e.count.toLocaleString()), h("td", e.firstDay), h("td", e.lastDay),
          h("td", e.libs.join(", ") || "—"), h("td", e.appVersions.join(", ") || "—"),
          h("td", h("details", h("summary", `${new Set(e.properties.map((p) => p.name)).size}`),
            h("ul.plain", e.properties.map((p) => h("li", h("code", p.name), " ", typeBadge(p.type)))))))))));

    clear(properties, shownProperties.length === 0 ? empty(catalog.properties.length === 0 ? "No properties stored yet." : "No property matches.")
      : h("table.grid.properties-catalog",
        h("thead", h("tr", ["Property", "Kind", "Type", "Events", "First day", "Last day", "Sample"].map((t) => h("th", t)))),
        h("tbody", shownProperties.map((p) => h("tr", { dataset: { property: p.name, kind: p.kind } },
          h("td", { title: p.description ?? null }, h("code", p.name), named(p)), h("td", p.kind), h("td", typeBadge(p.type), p.conflicts.length ? h("span.badge.warn", "another type seen") : null),
          h("td", p.kind === "profile" ? "—" : p.events.join(", ")), h("td", p.firstDay), h("td", p.lastDay),
          h("td.id", h("code", p.sample)))))));
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

  filter.addEventListener("input", () => { if (catalog) show(); });
  clear(main,
    h("h1", `Metadata · ${project}`),
    h("p.muted", "What this project sends, as the collector catalogued it while storing: a property's type is the Sensors type of its first value. Analysts read the same in analytics.catalog_events and analytics.catalog_properties."),
    h("div.toolbar", filter, h("button", { type: "button", onclick: refresh }, "Refresh"), status),
    h("section", h("h2", "Properties sent with another type"),
      h("p.muted.small", "Records whose value had another type than the property's. They are stored as sent; read such properties with analytics.as_number(properties, 'name') and its siblings, which give NULL for a value of another type."),
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
