// The console's shell: sign-in, the header with the project picker, and a hash router that hands
// the main area to one view at a time.
import { api, call, session, ApiError } from "./api.js";
import { h, clear, notice } from "./dom.js";
import { projectsView } from "./projects.js";
import { trackingView } from "./tracking.js";
import { documentView, KINDS } from "./documents.js";
import { liveView } from "./live.js";
import { identityView } from "./identity.js";
import { privacyView } from "./privacy.js";
import { auditView } from "./audit.js";
import { metadataView } from "./metadata.js";
import { reportsView } from "./reports.js";

const root = document.getElementById("app");
let projects = [];
let stopView = null;

export const state = {
  get project() { return sessionStorage.getItem("datong.project") || projects[0]?.name || "default"; },
  set project(name) { sessionStorage.setItem("datong.project", name); },
  async reloadProjects() { projects = await api.get("/v1/projects"); return projects; },
  get projects() { return projects; },
};

function signIn(message) {
  session.token = null;
  if (stopView) { stopView(); stopView = null; }
  const input = h("input#token", { type: "password", name: "token", autocomplete: "current-password", required: true, placeholder: "admin token", "aria-label": "Admin token" });
  const status = h("div.status");
  const form = h("form.signin", {
    onsubmit: async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      clear(status);
      try {
        await call("GET", "/v1/projects", { token });
        session.token = token;
        await start();
      } catch (error) {
        const text = error instanceof ApiError && error.status === 401
          ? "That admin token is not valid (or was revoked). Check ADMIN_TOKEN or ask for a new token."
          : error.message;
        clear(status, notice("error", text));
        input.select();
      }
    },
  },
    h("h1", "Datong console"),
    h("p.muted", "Sign in with an admin token: ADMIN_TOKEN, or one made with POST /v1/admin-tokens. It is kept in this tab only."),
    h("label", { for: "token" }, "Admin token"), input,
    h("button.primary", { type: "submit" }, "Sign in"),
    status,
    message ? notice("error", message) : null,
  );
  clear(root, h("main.signin-page", form));
  input.focus();
}

function header(route) {
  const picker = h("select#project", {
    "aria-label": "Project",
    onchange: () => { state.project = picker.value; location.hash = `#/p/${picker.value}/${route.page || "live"}`; },
  }, projects.map((p) => h("option", { value: p.name, selected: p.name === state.project }, p.name)));
  const link = (href, text, active) => h("a", { href, "aria-current": active ? "page" : null }, text);
  const p = state.project;
  return h("header.top",
    h("a.brand", { href: "#/projects", title: "打通 Datong" }, "Datong"),
    h("label.project-picker", "Project ", picker),
    h("nav",
      link("#/projects", "Projects", route.name === "projects"),
      link(`#/p/${p}/tracking`, "Tracking table", route.page === "tracking"),
      link(`#/p/${p}/documents/remote-config`, "Documents", route.page === "documents"),
      link(`#/p/${p}/live`, "Live data", route.page === "live"),
      link(`#/p/${p}/reports/trend`, "Reports", route.page === "reports"),
      link(`#/p/${p}/metadata`, "Metadata", route.page === "metadata"),
      link(`#/p/${p}/identity`, "Identity", route.page === "identity"),
      link(`#/p/${p}/privacy`, "Privacy", route.page === "privacy"),
      link("#/audit", "Audit", route.name === "audit"),
    ),
    h("button.link", { type: "button", onclick: () => signIn() }, "Sign out"),
  );
}

function parseRoute() {
  // A view's query follows "?" (the Reports page keeps its report there, so its link shares it).
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").map(decodeURIComponent);
  if (parts[0] === "p" && parts[1]) return { name: "project", project: parts[1], page: parts[2] || "live", arg: parts[3], query: new URLSearchParams(query) };
  if (parts[0] === "audit") return { name: "audit" };
  return { name: "projects" };
}

async function render() {
  if (!session.token) return signIn();
  const route = parseRoute();
  if (route.project) state.project = route.project;
  if (stopView) { stopView(); stopView = null; }
  const main = h("main#view");
  clear(root, header(route), main);
  try {
    if (route.name === "projects") stopView = await projectsView(main);
    else if (route.name === "audit") stopView = await auditView(main);
    else if (route.page === "tracking") stopView = await trackingView(main, route.project);
    else if (route.page === "documents") stopView = await documentView(main, route.project, KINDS.some((k) => k.id === route.arg) ? route.arg : "remote-config");
    else if (route.page === "identity") stopView = await identityView(main, route.project);
    else if (route.page === "privacy") stopView = await privacyView(main, route.project);
    else if (route.page === "metadata") stopView = await metadataView(main, route.project);
    else if (route.page === "reports") stopView = await reportsView(main, route.project, route.arg, route.query);
    else stopView = await liveView(main, route.project);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
    clear(main, notice("error", error.message));
  }
  const heading = main.querySelector("h1");
  if (heading) document.title = `${heading.textContent} · Datong console`;
}

async function start() {
  try {
    await state.reloadProjects();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
    clear(root, notice("error", error.message));
    return;
  }
  if (!location.hash) location.hash = "#/projects";
  await render();
}

window.addEventListener("hashchange", () => { if (session.token) render(); });
window.addEventListener("datong:unauthorized", (event) => {
  signIn(`The admin token was refused: ${event.detail.message}. Sign in again.`);
});

if (session.token) start(); else signIn();
