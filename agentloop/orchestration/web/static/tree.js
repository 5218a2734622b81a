// The run tree and the runnable graph, as plain DOM (no library, no build step).
// Every text from the server goes in with textContent, never as HTML.
"use strict";

const Tree = (() => {
  const RUNNING = new Set(["started", "progress"]);

  function shownStatus(status) {
    if (RUNNING.has(status)) return "running";
    if (status === "completed") return "done";
    return status || "pending";
  }

  // "pipeline/0/branch/q1" -> "pipeline/0"; "pipeline/0" -> ""; "" -> null (the root).
  function parentPath(path) {
    if (!path) return null;
    const parts = path.split("/");
    return parts.slice(0, Math.max(0, parts.length - 2)).join("/");
  }

  // A short name for a node: "stage 1", "branch q1", or "root".
  function place(path) {
    if (!path) return "root";
    const parts = path.split("/");
    const kind = parts[parts.length - 2];
    const key = parts[parts.length - 1];
    return kind === "pipeline" ? `stage ${Number(key) + 1}` : `${kind} ${key}`;
  }

  function tokensOf(event) {
    const usage = event.data && event.data.usage;
    if (!usage || typeof usage !== "object") return null;
    return (Number(usage.input_tokens) || 0) + (Number(usage.output_tokens) || 0);
  }

  // The state of every node seen so far, by path, in the order first seen.
  class RunTree {
    constructor() { this.nodes = new Map(); }

    apply(event) {
      const path = event.path || "";
      let node = this.nodes.get(path);
      if (!node) {
        node = { path, depth: path ? path.split("/").length / 2 : 0, tokens: null };
        this.nodes.set(path, node);
        let parent = parentPath(path);
        while (parent !== null && !this.nodes.has(parent)) {
          this.nodes.set(parent, { path: parent, depth: parent ? parent.split("/").length / 2 : 0,
            runnable: "", status: "pending", tokens: null });
          parent = parentPath(parent);
        }
      }
      node.runnable = event.runnable;
      node.iteration = event.iteration;
      node.max = event.max_iterations;
      node.status = shownStatus(event.status);
      node.phase = event.phase;
      node.message = event.message;
      const tokens = tokensOf(event);
      if (tokens !== null) node.tokens = tokens;
    }

    // Depth-first, children in the order first seen.
    ordered() {
      const children = new Map();
      for (const node of this.nodes.values()) {
        const parent = parentPath(node.path);
        if (parent === null) continue;
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(node);
      }
      const out = [];
      const visit = (node) => {
        out.push(node);
        for (const child of children.get(node.path) || []) visit(child);
      };
      if (this.nodes.has("")) visit(this.nodes.get(""));
      return out;
    }
  }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text === undefined || text === null ? "" : String(text);
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function renderTree(tbody, tree, rootTokens) {
    const rows = tree.ordered().map((node) => {
      const row = document.createElement("tr");
      row.dataset.path = node.path;
      row.dataset.status = node.status;
      row.className = `status-${node.status}`;
      const where = cell(row, place(node.path), "path");
      where.style.paddingLeft = `${0.4 + node.depth * 1.4}em`;
      where.title = node.path || "(root)";
      cell(row, node.runnable);
      cell(row, node.max ? `${node.iteration}/${node.max}` : "");
      cell(row, node.status, "status");
      cell(row, node.message, "message");
      const tokens = node.path === "" && rootTokens !== null ? rootTokens : node.tokens;
      cell(row, tokens === null ? "" : tokens, "tokens");
      return row;
    });
    tbody.replaceChildren(...rows);
  }

  function box(node) {
    const div = document.createElement("div");
    div.className = `node kind-${node.kind}`;
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = node.label;
    const kind = document.createElement("div");
    kind.className = "kind";
    let what = node.kind.replace("_", " ");
    if (node.kind === "loop") what += `, up to ${node.max_iterations} iterations`;
    if (node.kind === "composite") {
      what += `: a branch each, ${node.failure_policy}`;
      if (node.max_concurrency) what += `, ${node.max_concurrency} at once`;
    }
    if (!node.derived) what += ` · ${node.name}`;
    if (node.recursive) what += " (recursive)";
    kind.textContent = what;
    div.append(title, kind);
    if (node.actions.length) {
      const actions = document.createElement("div");
      actions.className = "actions";
      for (const name of node.actions) {
        const chip = document.createElement("span");
        chip.className = "action";
        chip.textContent = name;
        actions.appendChild(chip);
      }
      div.appendChild(actions);
    }
    if (node.children.length && !node.recursive) {
      const inner = document.createElement("div");
      inner.className = node.kind === "pipeline" ? "stages" : "branches";
      node.children.forEach((child, index) => {
        if (index && node.kind === "pipeline") {
          const arrow = document.createElement("span");
          arrow.className = "arrow";
          arrow.textContent = "→";
          inner.appendChild(arrow);
        }
        inner.appendChild(box(child));
      });
      div.appendChild(inner);
    }
    return div;
  }

  function renderGraph(container, graph) {
    container.replaceChildren(box(graph));
  }

  return { RunTree, renderTree, renderGraph, shownStatus, parentPath, place };
})();
