// Projects: the list, a new project, its ingestion token (made here, shown once) and the time zone
// its reports count days in (docs/ANALYTICS.md, Reports).
import { api, seg, ApiError } from "./api.js";
import { h, clear, notice, time, empty } from "./dom.js";
import { state } from "./app.js";

/** 32 random bytes as hex, from the browser's secure generator. */
function newToken() {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export async function projectsView(main) {
  const list = h("div");
  const status = h("div.status", { "aria-live": "polite" });

  async function refresh() {
    const projects = await state.reloadProjects();
    if (projects.length === 0) return clear(list, empty("No projects yet."));
    clear(list, h("table.grid",
      h("thead", h("tr", h("th", "Project"), h("th", "Created"), h("th", "Ingestion token"), h("th", "Reports' time zone"), h("th", ""))),
      h("tbody", projects.map((p) => h("tr", { dataset: { project: p.name } },
        h("td", h("a", { href: `#/p/${seg(p.name)}/live` }, p.name)),
        h("td", time(p.createdAt)),
        h("td",
          h("button", { type: "button", onclick: () => setToken(p.name) }, "Set new token"), " ",
          h("button.link", { type: "button", onclick: () => clearToken(p.name) }, "Remove token")),
        h("td", timeZoneForm(p.name)),
        h("td.actions",
          h("a", { href: `#/p/${seg(p.name)}/tracking` }, "Tracking table"), " · ",
          h("a", { href: `#/p/${seg(p.name)}/documents/remote-config` }, "Documents")),
      ))),
    ));
  }

  async function setToken(project) {
    if (!confirm(`Give project '${project}' a new ingestion token? SDKs sending the old one are refused from now on.`)) return;
    const token = newToken();
    try {
      await api.put(`/v1/projects/${seg(project)}`, { token });
      const field = h("input.token-once", { readonly: true, value: token, "aria-label": "New ingestion token", size: 66 });
      clear(status, h("div.notice.ok", { role: "status" },
        h("p", `The new ingestion token of '${project}'. It is shown once: copy it now.`),
        field, " ",
        h("button", { type: "button", onclick: () => navigator.clipboard?.writeText(token) }, "Copy")));
      field.select();
    } catch (error) {
      clear(status, notice("error", error.message));
    }
  }

  /** The project's zone (UTC unless set), changed in place; the collector checks the name. */
  function timeZoneForm(project) {
    const field = h("input.time-zone", { name: "timeZone", size: 18, list: "time-zones", "aria-label": `Time zone of ${project}`, placeholder: "UTC" });
    api.get(`/v1/projects/${seg(project)}/time-zone`).then((answer) => { field.value = answer.timeZone; }).catch(() => {});
    return h("form.inline.time-zone-form", {
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const answer = await api.put(`/v1/projects/${seg(project)}/time-zone`, { timeZone: field.value.trim() });
          clear(status, notice("ok", `Project '${project}' counts its reports' days in ${answer.timeZone} now; the rollups are rebuilt in that zone.`));
        } catch (error) {
          clear(status, notice("error", error instanceof ApiError ? `${error.message} (${error.code})` : error.message));
        }
      },
    }, field, " ", h("button", { type: "submit" }, "Save"));
  }

  async function clearToken(project) {
    if (!confirm(`Remove the ingestion token of '${project}'? Uploads then need no token.`)) return;
    try {
      await api.put(`/v1/projects/${seg(project)}`, { token: null });
      clear(status, notice("ok", `Project '${project}' has no ingestion token now.`));
    } catch (error) {
      clear(status, notice("error", error.message));
    }
  }

  const name = h("input#new-project", { name: "project", required: true, pattern: "[A-Za-z][A-Za-z0-9_]*", maxlength: 64, placeholder: "shop_app", "aria-describedby": "project-rule" });
  const form = h("form.inline", {
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        await api.put(`/v1/projects/${seg(name.value)}`);
        clear(status, notice("ok", `Project '${name.value}' is ready.`));
        state.project = name.value;
        name.value = "";
        await refresh();
      } catch (error) {
        clear(status, notice("error", error instanceof ApiError ? `${error.message} (${error.code})` : error.message));
      }
    },
  }, h("label", { for: "new-project" }, "New project"), name, h("button.primary", { type: "submit" }, "Create"),
     h("small#project-rule.muted", "A letter, then letters, digits or underscores."));

  const zones = h("datalist#time-zones",
    ["UTC", "Asia/Shanghai", "Asia/Hong_Kong", "Asia/Taipei", "Asia/Tokyo", "Asia/Singapore", "Europe/London", "Europe/Berlin", "America/New_York", "America/Los_Angeles"]
      .map((zone) => h("option", { value: zone })));
  clear(main, h("h1", "Projects"), form, status, list, zones);
  await refresh();
}
