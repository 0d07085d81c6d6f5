// The audit trail of config-service: who published, rolled back, made or revoked what, and when.
import { api } from "./api.js";
import { h, clear, time, empty } from "./dom.js";
import { state } from "./app.js";

export async function auditView(main) {
  const list = h("div");
  const project = h("select#audit-project", { "aria-label": "Project", onchange: () => refresh() },
    h("option", { value: "" }, "all projects"), state.projects.map((p) => h("option", { value: p.name }, p.name)));

  async function refresh() {
    const records = await api.get("/v1/audit", { project: project.value, limit: 200 });
    if (records.length === 0) return clear(list, empty("Nothing recorded yet."));
    clear(list, h("table.grid.audit",
      h("thead", h("tr", ["When", "Who", "What", "Project", "Document", "Version", "Detail"].map((t) => h("th", t)))),
      h("tbody", records.map((r) => h("tr",
        h("td", time(r.at)), h("td", r.actor), h("td", h("code", r.action)), h("td", r.project ?? ""),
        h("td", r.kind ? `${r.kind}${r.platform ? ` (${r.platform}${r.appId ? `/${r.appId}` : ""})` : ""}` : ""),
        h("td", r.version ?? ""), h("td", r.detail ?? ""))))));
  }

  clear(main, h("h1", "Audit trail"), h("div.toolbar", project), list);
  await refresh();
}
