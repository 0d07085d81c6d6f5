// Small DOM helpers: h() builds elements, nothing is ever inserted as HTML text.

/** h("tag.class#id", {attr: value, onclick: fn, style: {width: "50%"}}, ...children) */
export function h(spec, attrs = {}, ...children) {
  const [tag, ...rest] = spec.split(/(?=[.#])/);
  const el = document.createElement(tag || "div");
  for (const part of rest) {
    if (part.startsWith(".")) el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs === null || typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs)) {
    children.unshift(attrs);
    attrs = {};
  }
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    // Through the CSSOM: the console's Content-Security-Policy (style-src 'self') ignores style attributes.
    else if (name === "style") Object.assign(el.style, value);
    else if (name === "value") el.value = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** An SVG element (the chart). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children.flat()) if (child) el.append(child);
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** "3 minutes ago"-style text for an ISO time, with the exact time as a tooltip. */
export function time(iso) {
  if (!iso) return h("span.muted", "—");
  const date = new Date(iso);
  return h("time", { datetime: date.toISOString(), title: date.toISOString() }, formatTime(date));
}

export function formatTime(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** A message line: kind is "error", "ok" or "info". */
export function notice(kind, text) {
  return h(`p.notice.${kind}`, { role: kind === "error" ? "alert" : "status" }, text);
}

export function empty(text) {
  return h("p.empty", text);
}

/** Pretty JSON text (2 spaces, keys in their order). */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}
