// A user's data on request (docs/PRIVACY.md): find a user, see what is held and download it, erase
// it after a confirm and watch the job, and the ids whose records the gateways drop.
import { api, call, url, session, seg, ApiError } from "./api.js";
import { h, clear, notice, time, empty } from "./dom.js";

const KEYS = [
  ["#user", "user number"],
  ["#distinct", "distinct_id (any id)"],
  ["$identity_login_id", "login id"],
  ["$identity_anonymous_id", "anonymous id"],
  ["$identity_cookie_id", "H5 cookie id"],
  ["$identity_idfv", "iOS IDFV"],
  ["$identity_android_id", "Android id"],
  ["$identity_mobile", "mobile"],
  ["$identity_email", "email"],
];

const TABLES = [
  ["events", "events"], ["profiles", "profiles"], ["profile_records", "profile records"], ["details", "details"],
["rejected", "refused records"], ["identity.users", "users (merged ones too)"],
];

export async function privacyView(main, project) {
  const base = `/v1/projects/${seg(project)}`;
  const key = h("select#privacy-key", { "aria-label": "Id kind" }, KEYS.map(([k, label]) => h("option", { value: k }, label)));
  const value = h("input#privacy-value", { required: true, placeholder: "the user number or one of the user's ids", size: 36, "aria-label": "Id" });
  const held = h("div.result#privacy-held", { "aria-live": "polite" });
  const jobs = h("div#privacy-jobs");
  const suppressed = h("div#privacy-suppressions");
  let polling = null;

  function reference() {
    const text = value.value.trim();
    if (key.value === "#user") {
      if (!/^\d+$/.test(text)) throw new ApiError(400, "invalid_value", "A user number is digits only.");
      return { query: { user: text }, body: { userId: +text }, label: `user ${text}` };
    }
    if (key.value === "#distinct") return { query: { distinct_id: text }, body: { distinctId: text }, label: `distinct_id ${text}` };
    return { query: { key: key.value, value: text }, body: { key: key.value, value: text }, label: `${key.value}=${text}` };
  }

  /** The export, read whole (a person's data), counted by table, offered as a download. */
  async function lookUp() {
    const ref = reference();
    clear(held, h("p.muted", "Reading what is held…"));
    const response = await fetch(url(`${base}/user-data`, ref.query), { headers: { Authorization: `Bearer ${session.token}` }, cache: "no-store" });
    const text = await response.text();
    if (!response.ok) {
      let problem = {};
      try { problem = JSON.parse(text); } catch { /* not JSON */ }
      if (problem.error === "unknown_user") {
        return clear(held, notice("info", `No user of project '${project}' is ${ref.label}.`
          + (ref.body.distinctId ? " Records refused under an id are found by its kind." : "")));
      }
      throw new ApiError(response.status, problem.error ?? "http", problem.message ?? `the export answered ${response.status}`);
    }
    const lines = text.split("\n").filter(Boolean).map((line) => JSON.parse(line));
    const last = lines[lines.length - 1];
    const counts = {};
    for (const line of lines) if (line.table) counts[line.table] = (counts[line.table] ?? 0) + 1;
    const users = lines.filter((l) => l.table === "identity.users").map((l) => l.row);
    const ids = users.flatMap((u) => u.identities ?? []);
    const download = h("a.button", {
      href: URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" })), download: `user-data-${project}.jsonl`,
    }, "Download the export (JSON lines)");
    // An id no user holds may still name someone known only from refused records (docs/PRIVACY.md).
    const refused = counts.rejected ?? 0;
    clear(held,
      last?.end ? null : notice("error", "The export stopped early; what is shown is not all. Look up again."),
      users.length ? null : notice("info", `No user of project '${project}' is ${ref.label}; `
        + (refused ? `${refused} refused records name it as their user. Erasing removes them and suppresses the id.`
          : "no refused record names it either. Erasing would only suppress the id.")),
      h("h2", `What is held about ${ref.label}`),
      h("table.grid.held", h("thead", h("tr", h("th", "Data"), h("th", "Rows"))),
        h("tbody", TABLES.map(([table, label]) => h("tr", { dataset: { table } }, h("td", label), h("td", String(counts[table] ?? 0)))))),
      h("p", `User numbers ${users.map((u) => u.userId).join(", ")}; ids: `, ids.map((i, n) => [n ? ", " : "", h("code", `${i.key}=${i.value}`)])),
      h("div.inline", download,
        h("label", h("input#privacy-keep", { type: "checkbox" }), " keep receiving their records (no suppression)"),
        h("button.danger#privacy-erase", { type: "button", onclick: () => erase(ref) }, "Erase this user…")));
  }

  async function erase(ref) {
    const keep = document.getElementById("privacy-keep")?.checked;
    const question = `Erase everything held about ${ref.label} in '${project}'? Events, profiles, ids, merges and refused records go for good.`
      + (keep ? " Later records of these ids will be stored again." : " Later records of these ids will be dropped until you lift it.");
    if (!confirm(question)) return;
    try {
      const job = await api.post(`${base}/erasures`, { user: ref.body, suppress: !keep });
      clear(held, notice("ok", `Erasure ${job.erasureId} started: ${job.users.length} users, ${job.identityCount} ids.`));
      await refresh();
    } catch (error) {
      held.prepend(notice("error", error.message));
    }
  }

  function counts(job) {
    const c = job.collector;
    const i = job.identity;
    const parts = [];
    if (c) parts.push(`${c.events} events, ${c.profiles} profiles, ${c.profileRecords} profile records, ${c.details} details, ${c.rejected} refused records${job.state === "done" ? "" : `; ${c.left} rows left`}`);
    if (i) parts.push(`${i.identities} ids, ${i.users} users, ${i.merges} merges, ${i.history} history entries`);
    return parts.join("; ");
  }

  async function refresh() {
    const [list, ids] = await Promise.all([api.get(`${base}/erasures`, { limit: 50 }), api.get(`${base}/suppressions`, { limit: 1000 })]);
    clear(jobs, list.length ? h("table.grid.erasures",
      h("thead", h("tr", ["Erasure", "Asked", "By", "User numbers", "State", "Removed so far", "Finished"].map((t) => h("th", t)))),
      h("tbody", list.map((j) => h("tr", { dataset: { erasure: j.erasureId, state: j.state } },
        h("td", `#${j.erasureId}`), h("td", time(j.createdAt)), h("td", j.actor), h("td", j.users.join(", ")),
        h("td", h("strong", j.state), j.lastError && j.state !== "done" ? h("div.muted", `retrying: ${j.lastError}`) : null),
        h("td", counts(j)), h("td", time(j.finishedAt))))))
      : empty("No erasures yet."));
    clear(suppressed, ids.length ? h("table.grid.suppressions",
      h("thead", h("tr", ["Id", "Erasure", "Since", ""].map((t) => h("th", t)))),
      h("tbody", ids.map((s) => h("tr",
        h("td.id", h("code", `${s.key}=${s.value}`)), h("td", s.erasureId ? `#${s.erasureId}` : ""), h("td", time(s.createdAt)),
        h("td", h("button.link.lift", { type: "button", onclick: () => lift(s) }, "Lift"))))))
      : empty("No ids are suppressed."));
    const running = list.some((j) => j.state !== "done");
    if (running && !polling) polling = setInterval(() => refresh().catch(() => {}), 1000);
    if (!running && polling) { clearInterval(polling); polling = null; }
  }

  async function lift(s) {
    if (!confirm(`Store records of ${s.key}=${s.value} again? Its records will reach analysts from now on.`)) return;
    try {
      await call("DELETE", `${base}/suppressions`, { params: { key: s.key, value: s.value } });
      await refresh();
    } catch (error) {
      suppressed.prepend(notice("error", error.message));
    }
  }

  // What the gateways add to this project's events from the request (docs/PRIVACY.md), audited.
  const choice = (id, label, options) => h(`label`, label, " ",
    h(`select#${id}`, options.map(([value, text]) => h("option", { value }, text))));
  const enrichmentNote = h("div#enrichment-note", { "aria-live": "polite" });
  const enrichment = h("form.inline#enrichment", {
    onsubmit: async (event) => {
      event.preventDefault();
      const read = (id) => enrichment.querySelector(`#${id}`).value;
      try {
        const now = await api.put(`${base}/enrichment`, {
          ip: read("enrichment-ip"), region: read("enrichment-region") === "on",
          userAgent: read("enrichment-ua") === "on", bots: read("enrichment-bots"),
        });
        show(now);
        clear(enrichmentNote, notice("ok", "Saved. The gateways apply it within seconds; the change is in the audit trail."));
      } catch (error) {
        clear(enrichmentNote, notice("error", error.message));
      }
    },
  },
  choice("enrichment-ip", "$ip", [["full", "stored in full"], ["truncated", "truncated (IPv4 /24, IPv6 /48)"], ["none", "not stored"]]),
  choice("enrichment-region", "Region", [["on", "from the address"], ["off", "off"]]),
  choice("enrichment-ua", "Browser and device", [["on", "from the User-Agent"], ["off", "off"]]),
  choice("enrichment-bots", "Crawlers", [["keep", "kept"], ["mark", "marked $is_bot"], ["drop", "dropped"]]),
  h("button.primary", { type: "submit" }, "Save"));
  function show(policy) {
    enrichment.querySelector("#enrichment-ip").value = policy.ip;
    enrichment.querySelector("#enrichment-region").value = policy.region ? "on" : "off";
    enrichment.querySelector("#enrichment-ua").value = policy.userAgent ? "on" : "off";
    enrichment.querySelector("#enrichment-bots").value = policy.bots;
  }

  const form = h("form.inline.privacy-lookup", {
    onsubmit: async (event) => {
      event.preventDefault();
      try { await lookUp(); } catch (error) { clear(held, notice("error", error.message)); }
    },
  }, key, value, h("button.primary", { type: "submit" }, "Show what is held"));

  clear(main, h("h1", `Privacy · ${project}`),
    h("p.muted", "A user's data on request: what Datong holds about a person, an export of it, and its erasure. Erasures run as jobs; their ids stay suppressed (their later records dropped at the gateway) until lifted."),
    form, held, h("h2", "Erasures"), jobs, h("h2", "Suppressed ids"), suppressed,
    h("h2", "What the gateways add"),
    h("p.muted", "The client's address ($ip) is personal data; the region, browser and device are derived from it and the User-Agent. The region is looked up from the full address whatever is stored."),
    enrichment, enrichmentNote);
  show(await api.get(`${base}/enrichment`));
  await refresh();
  value.focus();
  return () => { if (polling) clearInterval(polling); };
}
