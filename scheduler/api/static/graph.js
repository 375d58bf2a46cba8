/* The graph view of a DAG: its tasks as boxes laid out by dependency, left to right, and
   an arrow for each dependency; each box coloured by its task's state in one run.

   The layout is a layered one, made here in the browser from the DAG's task list:
   - layers: a task's layer is the longest path to it from a task without upstream
     (a task is always right of each of its upstream tasks);
   - an edge that spans several layers passes through a point per layer between (a
     "dummy" node), so it is routed around the boxes in between;
   - order within a layer: a few sweeps, left to right then back, each putting the nodes
     of a layer in the order of the mean position of their neighbours in the layer before
     (the barycentre heuristic), which removes most crossings;
   - each layer is centred vertically (top-aligned in a graph taller than CENTRED_MAX).
   Cost: O((V + E + D) · SWEEPS) where D is the number of dummy nodes (at most
   MAX_DUMMIES; past it, long edges are drawn straight). The view refuses DAGs of more
   than MAX_NODES tasks or MAX_EDGES dependencies, saying so, rather than hang the page.
   Boxes are buttons (keyboard and screen readers reach them; their text says the state);
   the arrows are an SVG underneath. */
"use strict";

const SluiceGraph = (() => {
  const MAX_NODES = 1000;
  const MAX_EDGES = 5000;
  const MAX_DUMMIES = 20000;
  const NODE_W = 168;
  const NODE_H = 40;
  const GAP_X = 64;
  const GAP_Y = 12;
  const DUMMY_H = 8;
  const PAD = 12;
  const CENTRED_MAX = 640; /* layers are centred when the tallest is this high at most, else
                              top-aligned: a big graph's first tasks are in view at once */
  const SVG_NS = "http://www.w3.org/2000/svg";

  /* Why the graph of these tasks is not drawn, or null if it can be. */
  function tooBig(tasks) {
    const edges = tasks.reduce((n, t) => n + t.upstream.length, 0);
    if (tasks.length > MAX_NODES) {
      return "This DAG has " + tasks.length + " tasks: the graph view draws DAGs of up to " +
        MAX_NODES + " tasks. The grid above shows every task.";
    }
    if (edges > MAX_EDGES) {
      return "This DAG has " + edges + " dependencies: the graph view draws up to " + MAX_EDGES +
        ". The grid above shows every task.";
    }
    return null;
  }

  /* Task ids upstream first (Kahn), those left in a cycle last; ties keep the list order. */
  function topological(ids, ups, downs) {
    const waiting = new Map(ids.map((id) => [id, ups.get(id).length]));
    const queue = ids.filter((id) => waiting.get(id) === 0);
    const order = [];
    for (let i = 0; i < queue.length; i++) {
      const id = queue[i];
      order.push(id);
      for (const down of downs.get(id)) {
        waiting.set(down, waiting.get(down) - 1);
        if (waiting.get(down) === 0) queue.push(down);
      }
    }
    if (order.length < ids.length) {
      const seen = new Set(order);
      for (const id of ids) if (!seen.has(id)) order.push(id);
    }
    return order;
  }

  /* The layout of `tasks` ({task_id, upstream: [ids]}, any order): {nodes: Map id ->
     {x, y, layer}, edges: [{from, to, points: [[x, y], ...]}], width, height}. */
  function layout(tasks) {
    const ids = tasks.map((t) => t.task_id);
    const known = new Set(ids);
    const ups = new Map();
    const downs = new Map(ids.map((id) => [id, []]));
    for (const t of tasks) {
      const mine = [...new Set(t.upstream)].filter((u) => known.has(u) && u !== t.task_id);
      ups.set(t.task_id, mine);
      for (const u of mine) downs.get(u).push(t.task_id);
    }
    const order = topological(ids, ups, downs);
    const layerOf = new Map();
    for (const id of order) {
      let layer = 0;
      for (const u of ups.get(id)) if (layerOf.has(u)) layer = Math.max(layer, layerOf.get(u) + 1);
      layerOf.set(id, layer);
    }
    const layerCount = ids.length ? Math.max(...layerOf.values()) + 1 : 0;

    /* Graph nodes: the tasks, then the dummies; neighbours across adjacent layers. */
    const items = order.map((id) => ({ id, layer: layerOf.get(id), dummy: false, preds: [], succs: [] }));
    const itemOf = new Map(items.map((it) => [it.id, it]));
    let spans = 0;
    for (const id of order) for (const u of ups.get(id)) spans += Math.max(0, layerOf.get(id) - layerOf.get(u) - 1);
    const routed = spans <= MAX_DUMMIES;
    const edges = [];
    for (const id of order) {
      for (const u of ups.get(id)) {
        const chain = [itemOf.get(u)];
        if (routed) {
          for (let l = layerOf.get(u) + 1; l < layerOf.get(id); l++) {
            const dummy = { id: null, layer: l, dummy: true, preds: [], succs: [] };
            items.push(dummy);
            chain.push(dummy);
          }
        }
        chain.push(itemOf.get(id));
        for (let i = 1; i < chain.length; i++) {
          chain[i - 1].succs.push(chain[i]);
          chain[i].preds.push(chain[i - 1]);
        }
        edges.push({ from: u, to: id, chain });
      }
    }

    const layers = Array.from({ length: layerCount }, () => []);
    for (const it of items) layers[it.layer].push(it);
    layers.forEach((layer) => layer.forEach((it, i) => { it.pos = i; }));
    const sweeps = items.length > 4000 ? 4 : 12;
    for (let s = 0; s < sweeps; s++) {
      const down = s % 2 === 0;
      for (let k = 1; k < layerCount; k++) {
        const layer = layers[down ? k : layerCount - 1 - k];
        const key = new Map(layer.map((it) => {
          const near = down ? it.preds : it.succs;
          let sum = 0;
          let n = 0;
          for (const other of near) if (other.layer !== it.layer) { sum += other.pos; n++; }
          return [it, n ? sum / n : it.pos];
        }));
        layer.sort((a, b) => key.get(a) - key.get(b) || a.pos - b.pos);
        layer.forEach((it, i) => { it.pos = i; });
      }
    }

    /* Coordinates: a box's top left corner; a dummy's is its slot's middle. */
    const heights = layers.map((layer) => layer.reduce(
      (h, it, i) => h + (it.dummy ? DUMMY_H : NODE_H) + (i ? GAP_Y : 0), 0));
    const tallest = Math.max(0, ...heights);
    layers.forEach((layer, l) => {
      let y = PAD + (tallest <= CENTRED_MAX ? (tallest - heights[l]) / 2 : 0);
      for (const it of layer) {
        it.x = PAD + l * (NODE_W + GAP_X);
        it.y = it.dummy ? y + DUMMY_H / 2 : y;
        y += (it.dummy ? DUMMY_H : NODE_H) + GAP_Y;
      }
    });
    const nodes = new Map(items.filter((it) => !it.dummy).map((it) => [it.id, { x: it.x, y: it.y, layer: it.layer }]));
    const out = edges.map(({ from, to, chain }) => {
      const points = [];
      chain.forEach((it, i) => {
        if (i === 0) points.push([it.x + NODE_W, it.y + NODE_H / 2]);
        else if (i === chain.length - 1) points.push([it.x, it.y + NODE_H / 2]);
        else points.push([it.x, it.y], [it.x + NODE_W, it.y]);
      });
      return { from, to, points };
    });
    return {
      nodes,
      edges: out,
      width: PAD * 2 + Math.max(0, layerCount * (NODE_W + GAP_X) - GAP_X),
      height: PAD * 2 + tallest,
    };
  }

  /* An SVG path through `points`: curves leaving and entering horizontally. */
  function pathOf(points) {
    let d = "M" + points[0][0] + " " + points[0][1];
    for (let i = 1; i < points.length; i++) {
      const [x0, y0] = points[i - 1];
      const [x1, y1] = points[i];
      if (y0 === y1) { d += " L" + x1 + " " + y1; continue; }
      const mid = (x1 - x0) / 2;
      d += " C" + (x0 + mid) + " " + y0 + " " + (x1 - mid) + " " + y1 + " " + x1 + " " + y1;
    }
    return d;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  /* Draw `tasks` into `container` (its children are replaced); `onOpen(taskId)` is
     called when a box is clicked. Returns {paint(cellOf, runLabel, selectedTask)}:
     `cellOf(taskId)` gives {state, tryNumber, mapped, states} of the task in the run
     shown (state "none" without a run), which colours and labels its box. A task with
     `group` set is a closed task group's box (labelled with the group, never disabled). */
  function draw(container, tasks, onOpen) {
    const placed = layout(tasks);
    const canvas = document.createElement("div");
    canvas.className = "graph-canvas";
    canvas.style.width = placed.width + "px";
    canvas.style.height = placed.height + "px";
    const lines = svg("svg", { class: "graph-edges", width: placed.width, height: placed.height, "aria-hidden": "true" });
    const defs = svg("defs");
    const marker = svg("marker", { id: "graph-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M0 0 L10 5 L0 10 z", class: "graph-arrowhead" }));
    defs.append(marker);
    lines.append(defs);
    for (const edge of placed.edges) {
      const path = svg("path", { d: pathOf(edge.points), class: "edge", "marker-end": "url(#graph-arrow)" });
      path.dataset.from = edge.from;
      path.dataset.to = edge.to;
      lines.append(path);
    }
    canvas.append(lines);
    const boxes = new Map();
    for (const t of tasks) {
      const at = placed.nodes.get(t.task_id);
      const name = Sluice.el("span", { class: "gnode-id", text: t.group ? "▸ " + t.group + " (group)" : t.task_id });
      const state = Sluice.el("span", { class: "gnode-state" });
      const box = Sluice.el("button", { type: "button", class: "gnode state-none" + (t.group ? " gnode-group" : ""), dataset: { task: t.task_id } },
        [name, state]);
      box.style.left = at.x + "px";
      box.style.top = at.y + "px";
      box.style.width = NODE_W + "px";
      box.style.height = NODE_H + "px";
      box.addEventListener("click", () => onOpen(t.task_id, box.dataset.mapped !== ""));
      canvas.append(box);
      boxes.set(t.task_id, { box, state, painted: "", group: Boolean(t.group) });
    }
    container.replaceChildren(canvas);

    function paint(cellOf, runLabel, selectedTask) {
      for (const [taskId, node] of boxes) {
        const cell = cellOf(taskId);
        const words = cell.mapped
          ? cell.mapped + " mapped indexes: " + Object.keys(cell.states).sort()
            .map((s) => cell.states[s] + " " + Sluice.stateWords(s)).join(", ")
          : Sluice.stateWords(cell.state) + (cell.tryNumber > 1 ? ", try " + cell.tryNumber : "");
        const selected = taskId === selectedTask;
        const key = [cell.state, words, runLabel, selected].join("\u0000");
        if (node.painted === key) continue;
        node.painted = key;
        const box = node.box;
        box.className = "gnode state-" + cell.state + (cell.mapped ? " mapped" : "") +
          (selected ? " selected" : "") + (node.group ? " gnode-group" : "");
        box.dataset.state = cell.state;
        box.dataset.mapped = cell.mapped || "";
        box.disabled = !runLabel && !node.group; /* a group opens without a run too */
        box.setAttribute("aria-pressed", selected ? "true" : "false");
        node.state.textContent = Sluice.stateWords(cell.state) + (cell.mapped ? " ×" + cell.mapped : "") +
          (!cell.mapped && cell.tryNumber > 1 ? ", try " + cell.tryNumber : "");
        const said = taskId + (runLabel ? " in run " + runLabel : "") + ": " + words;
        box.title = said;
        box.setAttribute("aria-label", said);
      }
    }
    return { paint, edges: placed.edges.length };
  }

  return { draw, layout, tooBig, MAX_NODES, MAX_EDGES };
})();
