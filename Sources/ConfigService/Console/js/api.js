// The admin API, same origin. The token lives in this tab's session storage only: never in a URL,
// never in local storage, gone when the tab closes.

const TOKEN_KEY = "datong.adminToken";

export class ApiError extends Error {
  constructor(status, code, message, problems = []) {
    super(message);
    this.status = status;
    this.code = code;
    this.problems = problems;
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY); },
  set token(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
};

/**
 * A path with its query; parameters that are undefined, null or "" are left out. Written as RFC 3986
 * percent-encoding (a space is %20, a plus %2B): the services read a query that way, where
 * URLSearchParams would write a space as "+", which they read as a plus.
 */
export function url(path, params = {}) {
  const pairs = [];
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") pairs.push(`${encodeURIComponent(name)}=${encodeURIComponent(String(value))}`);
  }
  return pairs.length ? `${path}?${pairs.join("&")}` : path;
}

export async function call(method, path, { params, body, token = session.token } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url(path, params), { method, headers, body: payload, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, "network", `config-service cannot be reached (${error.message}).`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!response.ok) {
    const code = data?.error ?? `http_${response.status}`;
    const message = data?.message ?? `${method} ${path} answered ${response.status}`;
    const error = new ApiError(response.status, code, message, data?.problems ?? []);
    if (response.status === 401 && token === session.token) {
      window.dispatchEvent(new CustomEvent("datong:unauthorized", { detail: error }));
    }
    throw error;
  }
  return data;
}

export const api = {
  get: (path, params) => call("GET", path, { params }),
  put: (path, body, params) => call("PUT", path, { body, params }),
  post: (path, body, params) => call("POST", path, { body, params }),
  delete: (path) => call("DELETE", path),
};

/** Encodes one path segment (project names are plain, identities and ids may not be). */
export const seg = encodeURIComponent;
