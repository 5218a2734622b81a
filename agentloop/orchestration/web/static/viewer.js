// The run viewer: the runs list, and one run as a live tree over Server-Sent Events.
// The token comes from the address (#token=..., never sent to a server) or the form,
// and stays in this tab's sessionStorage.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "agentloop.token";
let token = null;
let listTimer = null;
let follow = null; // the run followed now: {id, abort, tree, lastId}

function takeTokenFromAddress() {
  const params = new URLSearchParams(location.hash.slice(1));
  const given = params.get("token");
  if (given) {
    sessionStorage.setItem(KEY, given);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? `#${rest}` : ""));
  }
  token = sessionStorage.getItem(KEY);
}

class Refused extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${token}`, ...(options.headers || {}) };
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) { signOut("the token was refused"); throw new Refused(401, "unauthenticated"); }
  const body = response.status === 204 ? null : await response.json();
  if (!response.ok) throw new Refused(response.status, body && body.error ? body.error.message : response.statusText);
  return body;
}

function signOut(reason) {
  sessionStorage.removeItem(KEY);
  token = null;
  stopFollowing();
  clearInterval(listTimer);
  $("main").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  $("login-error").textContent = reason || "";
}

async function signIn() {
  $("login").hidden = true;
  $("main").hidden = false;
  $("forget").hidden = false;
  $("who").textContent = "token set";
  await loadRunnables();
  await refreshList();
  clearInterval(listTimer);
  listTimer = setInterval(refreshList, 2000);
  route();
}

// ----- the runs list ------------------------------------------------------------------------

function short(id) { return id.length > 12 ? `${id.slice(0, 12)}…` : id; }

async function refreshList() {
  if (!token) return;
  let body;
  try { body = await api("/runs?limit=50"); } catch (error) { return; }
  const rows = body.runs.map((run) => {
    const row = document.createElement("tr");
    row.dataset.run = run.id;
    row.className = `status-${run.status}`;
    const link = document.createElement("a");
    link.href = `#run=${encodeURIComponent(run.id)}`;
    link.textContent = short(run.id);
    link.title = run.id;
    const first = document.createElement("td");
    first.appendChild(link);
    row.appendChild(first);
    for (const text of [run.runnable, run.status, run.usage.total_tokens,
      run.created_at ? new Date(run.created_at).toLocaleTimeString() : ""]) {
      const td = document.createElement("td");
      td.textContent = String(text);
      row.appendChild(td);
    }
    return row;
  });
  $("runs").tBodies[0].replaceChildren(...rows);
}

async function loadRunnables() {
  let body;
  try { body = await api("/runnables"); } catch (error) { return; }
  const options = body.runnables.filter((r) => r.declared).map((r) => {
    const option = document.createElement("option");
    option.value = r.name;
    option.textContent = `${r.name} (${r.kind})`;
    return option;
  });
  $("start-runnable").replaceChildren(...options);
}

async function startRun(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  let input;
  try { input = JSON.parse($("start-input").value || "null"); } catch (error) {
    $("start-error").textContent = "the input is not JSON";
    return;
  }
  try {
    const run = await api("/runs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ runnable: $("start-runnable").value, input }),
    });
    location.hash = `run=${encodeURIComponent(run.id)}`;
    refreshList();
  } catch (error) {
    $("start-error").textContent = error.message;
  }
}

// ----- one run ------------------------------------------------------------------------------

function route() {
  const id = new URLSearchParams(location.hash.slice(1)).get("run");
  if (id && token) showRun(id); else { stopFollowing(); $("run").hidden = true; }
}

function stopFollowing() {
  if (follow) follow.abort.abort();
  follow = null;
}

// A run's step-cache use, e.g. "2 hits, 1 miss, 48 tokens saved" ("" when nothing was cached).
function cacheUse(usage) {
  const hits = Number(usage.cache_hits) || 0;
  const misses = Number(usage.cache_misses) || 0;
  if (!hits && !misses) return "";
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
  const saved = Number(usage.tokens_saved) || 0;
  return `${plural(hits, "hit", "hits")}, ${plural(misses, "miss", "misses")}, ${saved} tokens saved`;
}

function showSummary(run) {
  $("run-runnable").textContent = run.runnable;
  $("run-status").textContent = run.status;
  $("run-status").className = `status-${run.status}`;
  $("run-tokens").textContent = String(run.usage.total_tokens);
  $("run-cache").textContent = cacheUse(run.usage);
  $("run-cancel").disabled = run.finished;
  $("run-result").textContent = JSON.stringify(run.error || run.result, null, 2);
}

async function showRun(id) {
  if (follow && follow.id === id) return;
  stopFollowing();
  $("run").hidden = false;
  $("run-id").textContent = id;
  $("run-stream").textContent = "connecting";
  follow = { id, abort: new AbortController(), tree: new Tree.RunTree(), lastId: null, total: null };
  $("tree").tBodies[0].replaceChildren();
  $("graph").replaceChildren();
  $("mermaid").textContent = "";
  try {
    const run = await api(`/runs/${encodeURIComponent(id)}`);
    showSummary(run);
    follow.total = run.usage.total_tokens;
    const graph = await api(`/runnables/${encodeURIComponent(run.runnable)}/graph`);
    Tree.renderGraph($("graph"), graph.graph);
    $("mermaid").textContent = graph.mermaid;
  } catch (error) {
    $("run-stream").textContent = error.message;
    return;
  }
  stream(follow);
}

// Server-Sent Events read with fetch (an EventSource cannot send the Authorization header),
// resumed with Last-Event-ID after a dropped connection, until the "end" event.
async function stream(current) {
  while (follow === current) {
    const headers = { Authorization: `Bearer ${token}` };
    if (current.lastId !== null) headers["Last-Event-ID"] = String(current.lastId);
    try {
      const response = await fetch(`/runs/${encodeURIComponent(current.id)}/events`,
        { headers, signal: current.abort.signal });
      if (response.status === 204) { $("run-stream").textContent = "ended"; return; }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      $("run-stream").textContent = "live";
      if (await readFrames(response, current)) return;
    } catch (error) {
      if (current.abort.signal.aborted) return;
      $("run-stream").textContent = `reconnecting (${error.message})`;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function readFrames(response, current) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (onFrame(frame, current)) return true;
    }
  }
}

function onFrame(frame, current) {
  let kind = "message", data = "", id = null;
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") kind = value;
    else if (field === "data") data += data ? `\n${value}` : value;
    else if (field === "id") id = value;
  }
  if (!data || follow !== current) return false;
  const view = JSON.parse(data);
  if (kind === "progress") {
    current.lastId = Number(id);
    current.tree.apply(view);
  } else if (kind === "end") {
    showSummary(view);
    current.total = view.usage.total_tokens;
    $("run-stream").textContent = "ended";
    refreshList();
  }
  Tree.renderTree($("tree").tBodies[0], current.tree, current.total);
  return kind === "end";
}

async function cancelRun() {
  if (!follow) return;
  try {
    showSummary(await api(`/runs/${encodeURIComponent(follow.id)}/cancel`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" }));
  } catch (error) {
    $("run-stream").textContent = error.message;
  }
}

window.addEventListener("DOMContentLoaded", () => {
  takeTokenFromAddress();
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    $("token").value = "";
    signIn();
  });
  $("forget").addEventListener("click", () => signOut(""));
  $("start-form").addEventListener("submit", startRun);
  $("run-cancel").addEventListener("click", cancelRun);
  window.addEventListener("hashchange", () => { takeTokenFromAddress(); route(); });
  if (token) signIn(); else signOut("");
});
