// Identity lookup: any id to its user, the user's identities and merge history; undo a merge.
import { api, seg, ApiError } from "./api.js";
import { h, clear, notice, time, empty } from "./dom.js";

const KEYS = [
  ["$identity_login_id", "login id"],
  ["$identity_anonymous_id", "anonymous id"],
  ["$identity_cookie_id", "H5 cookie id"],
  ["$identity_idfv", "iOS IDFV"],
  ["$identity_android_id", "Android id"],
  ["$identity_android_uuid", "Android UUID"],
  ["$identity_ios_uuid", "iOS UUID"],
  ["$identity_mobile", "mobile"],
  ["$identity_email", "email"],
];

export async function identityView(main, project) {
  const base = `/v1/projects/${seg(project)}`;
  const key = h("select#lookup-key", { "aria-label": "Identity kind" },
    h("option", { value: "" }, "any kind"), h("option", { value: "#user" }, "user number"),
    KEYS.map(([k, label]) => h("option", { value: k }, `${label} (${k})`)));
  const value = h("input#lookup-value", { required: true, placeholder: "an id: distinct id, login id, device id…", size: 36, "aria-label": "Identity value" });
  const result = h("div.result", { "aria-live": "polite" });

  /** The user holding `value` under `key`, or under any common key. */
  async function findUser() {
    if (key.value === "#user") {
      if (!/^\d+$/.test(value.value.trim())) throw new ApiError(400, "invalid_value", "A user number is digits only.");
      return { userId: +value.value.trim(), via: "user number" };
    }
    const keys = key.value ? [key.value] : KEYS.map(([k]) => k);
    const answers = await Promise.all(keys.map((k) =>
      api.get(`${base}/identities`, { key: k, value: value.value.trim() })
        .then((a) => ({ userId: a.userId, via: k }))
        .catch((error) => { if (error.code === "unknown_identity") return null; throw error; })));
    return answers.find(Boolean) ?? null;
  }

  async function show(userId, via) {
    const [user, history] = await Promise.all([api.get(`${base}/users/${userId}`), api.get(`${base}/users/${userId}/history`)]);
    const merges = history.merges ?? [];
    clear(result,
      via ? h("p.muted", `Found through ${via}.`) : null,
      h("h2", `User ${user.userId}`),
      user.canonicalUserId !== user.userId
        ? notice("info", `Merged into user ${user.canonicalUserId}; its events count there now.`) : null,
      h("dl.facts", h("dt", "created"), h("dd", time(user.createdAt)), h("dt", "counts as user"), h("dd", String(user.canonicalUserId))),
      h("h3", "Identities"),
      user.identities.length
        ? h("table.grid.identities", h("thead", h("tr", h("th", "Key"), h("th", "Value"))),
            h("tbody", user.identities.map((i) => h("tr", h("td", h("code", i.key)), h("td.id", i.value)))))
        : empty("No identities (all moved by merges)."),
      h("h3", "Merges"),
      merges.length ? h("table.grid.merges",
        h("thead", h("tr", ["Merge", "When", "From → into", "Reason", "By", "Identities moved", ""].map((t) => h("th", t)))),
        h("tbody", merges.map((m) => h("tr", { dataset: { merge: m.mergeId } },
          h("td", `#${m.mergeId}`), h("td", time(m.createdAt)), h("td", `${m.fromUser} → ${m.intoUser}`), h("td", m.reason), h("td", m.actor),
          h("td", m.identities.map((i) => `${i.key}=${i.value}`).join(", ")),
          h("td", m.undoneAt ? h("span.muted", `undone ${new Date(m.undoneAt).toLocaleString()} by ${m.undoneBy ?? "?"}`)
            : h("button.undo.danger", { type: "button", onclick: () => undo(m) }, "Undo merge")))))) : empty("No merges."),
      h("h3", "Other history"),
      (history.entries ?? []).length ? h("ul.history-entries", history.entries.map((e) => h("li",
        time(e.createdAt), " ", h("strong", e.kind), " ", e.key ? h("code", `${e.key}=${e.value}`) : null, " ", e.reason, " (", e.actor, ")")))
        : empty("Nothing else recorded."));
  }

  async function undo(merge) {
    if (!confirm(`Undo merge #${merge.mergeId}? User ${merge.fromUser} gets back the identities it had, and its events count under it again.`)) return;
    try {
      await api.post(`${base}/merges/${merge.mergeId}/undo`);
      await show(merge.intoUser);
      result.prepend(notice("ok", `Merge #${merge.mergeId} is undone: user ${merge.fromUser} stands on its own again.`));
    } catch (error) {
      result.prepend(notice("error", error.message));
    }
  }

  const form = h("form.inline.lookup", {
    onsubmit: async (event) => {
      event.preventDefault();
      clear(result, h("p.muted", "Looking up…"));
      try {
        const found = await findUser();
        if (!found) return clear(result, notice("info", `No user of project '${project}' holds '${value.value.trim()}'${key.value ? ` as ${key.value}` : ""}.`));
        await show(found.userId, found.via);
      } catch (error) {
        clear(result, notice("error", error.message));
      }
    },
  }, key, value, h("button.primary", { type: "submit" }, "Look up"));

  clear(main, h("h1", `Identity · ${project}`),
    h("p.muted", "Any id to its user: the identities it holds, the merges that made it, and an undo for a wrong merge."), form, result);
  value.focus();
}
