/* Task groups on the DAG page: which group each task is in, a group's state in a run
   (one state for all its tasks), and the graph's tasks with each closed group drawn as
   one box.

   `groups` is the DAG detail's list ({group_id, parent, mapped, tasks}: a group's tasks
   include its nested groups'). A task is in the innermost group that lists it; a group
   is shown open or closed (`open`, a Set of group ids: closed unless in it). */
"use strict";

const SluiceGroups = (() => {
  /* The state a group shows in a run: the most pressing of its tasks' (a failure first,
     then what runs or waits, then what ended well). */
  const PRESSING = ["failed", "upstream_failed", "up_for_retry", "running", "deferred",
    "up_for_reschedule", "queued", "scheduled", "restarting", "none", "removed", "skipped",
    "success"];
  const GROUP_PREFIX = "group:";

  function index(groups) {
    const parentOf = new Map();
    const innermost = new Map();
    const depth = new Map();
    for (const g of groups || []) parentOf.set(g.group_id, g.parent || null);
    const depthOf = (id) => {
      let n = 0;
      for (let p = parentOf.get(id); p; p = parentOf.get(p)) n++;
      return n;
    };
    for (const g of groups || []) {
      depth.set(g.group_id, depthOf(g.group_id));
      for (const t of g.tasks) {
        const had = innermost.get(t);
        if (had === undefined || depth.get(g.group_id) > depth.get(had)) innermost.set(t, g.group_id);
      }
    }
    const members = new Map((groups || []).map((g) => [g.group_id, g.tasks]));
    const mapped = new Set((groups || []).filter((g) => g.mapped).map((g) => g.group_id));
    /* The groups `taskId` is in, outermost first. */
    function chainOf(taskId) {
      const chain = [];
      for (let g = innermost.get(taskId); g; g = parentOf.get(g)) chain.unshift(g);
      return chain;
    }
    /* The outermost closed group holding `taskId`, or null if every one is open. */
    function closedOf(taskId, open) {
      return chainOf(taskId).find((g) => !open.has(g)) || null;
    }
    return { chainOf, closedOf, members, mapped, parentOf, empty: !(groups || []).length };
  }

  function aggregate(states) {
    let best = null;
    for (const s of states) {
      const rank = PRESSING.indexOf(s);
      const r = rank < 0 ? PRESSING.indexOf("none") : rank;
      if (best === null || r < best) best = r;
    }
    return best === null ? "none" : PRESSING[best];
  }

  function countsOf(states) {
    const counts = {};
    for (const s of states) counts[s] = (counts[s] || 0) + 1;
    return counts;
  }

  /* The graph's tasks with each closed group's tasks drawn as one box (`group:<id>`,
     upstream of what its tasks are upstream of): the box's id, its label, its members. */
  function collapsed(tasks, idx, open) {
    const nodeOf = (id) => {
      const g = idx.closedOf(id, open);
      return g ? GROUP_PREFIX + g : id;
    };
    const nodes = new Map();
    for (const t of tasks) {
      const id = nodeOf(t.task_id);
      if (!nodes.has(id)) nodes.set(id, { task_id: id, upstream: new Set(), group: id === t.task_id ? null : id.slice(GROUP_PREFIX.length) });
      for (const up of t.upstream) {
        const from = nodeOf(up);
        if (from !== id) nodes.get(id).upstream.add(from);
      }
    }
    return [...nodes.values()].map((n) => ({ task_id: n.task_id, upstream: [...n.upstream], group: n.group }));
  }

  return { index, aggregate, countsOf, collapsed, GROUP_PREFIX };
})();
