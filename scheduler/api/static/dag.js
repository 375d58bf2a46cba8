/* `/dags/{dag_id}`: the grid of runs by tasks, the graph and Gantt chart of one run, the
   trigger form (a field per param of the DAG, or its raw JSON conf) and the task panel.

   The grid refreshes every ACTIVE_MS while a run is queued or running, else every IDLE_MS;
   an open panel refreshes with it until its try has finished. It reads the compact grid
   (one string of state codes per run) of its first `shownRows` rows only: a DAG of
   10,000 tasks is neither read whole nor drawn as 250,000 cells at each refresh; "Show
   more" adds ROWS_STEP rows and reads them. Each run's header has a bar whose height is
   the run's duration (the longest run shown is the tallest); clicking it selects the run.

   The run view shows the selected run (by default the newest): its graph (the DAG's
   tasks coloured by their state in that run, from the same grid read: while the graph
   is shown the grid read covers every task, SluiceGraph.MAX_NODES at most) or its Gantt
   chart (from `…/runs/{run_id}/tries`, read again at each refresh while the run is
   active).

   A run of a git bundle's DAG shows its version: the short sha under its column (the
   subject in its title) and, in the run view, the short sha and the commit's subject,
   each linked to the version's page (`/dags/{dag_id}/versions/{sha}`: the DAG file's
   code at that version, and the tasks it adds and removes). */
"use strict";

(() => {
  const S = Sluice;
  const ACTIVE_MS = 1500;
  const IDLE_MS = 10000;
  const GRID_RUNS = 25;
  const ROWS_STEP = 200;
  const RUN_ACTIVE = new Set(["queued", "running"]);
  const dagId = decodeURIComponent(window.location.pathname.split("/")[2] || "");
  const dagPath = "/dags/" + encodeURIComponent(dagId);
  const $ = (id) => document.getElementById(id);
  const status = $("status");
  let timer = null;
  let selected = null; /* {runId, taskId, tryNumber (null: current), finished} */
  let shownRows = ROWS_STEP; /* kept across refreshes; grows with "Show more" */
  const BAR_PX = 48; /* the bar of the longest run shown */
  const GANTT_ROWS = 500;
  let dagTasks = null; /* the DAG's tasks (GET /dags/{id}), in topological order */
  let graph = null; /* SluiceGraph.draw's answer for dagTasks, once drawn */
  let lastGrid = null;
  let rowsRead = 0; /* the rows the last grid answer was asked for */
  let pickedRun = null; /* the run the user selected; null: the newest */
  let view = "graph"; /* the run view's tab: "graph" or "gantt" */
  let ganttDone = null; /* the run whose Gantt chart is loaded and will not change */
  let groupIndex = SluiceGroups.index([]); /* the DAG's task groups */
  let groupsSeen = "[]"; /* their JSON, to redraw the grid when they change */
  const openGroups = new Set(); /* the groups shown open: a group is one row, one box, until opened */

  function report(text, kind) { S.setStatus(status, text, kind); }

  function versionHref(sha) { return dagPath + "/versions/" + encodeURIComponent(sha); }

  /* The link to a run's version: its short sha as text (the subject in its title). */
  function versionLink(run, cls, text) {
    return S.el("a", {
      class: cls,
      href: versionHref(run.version.sha),
      title: "version " + run.version.short + ": " + run.version.subject,
      dataset: { run: run.run_id, sha: run.version.sha },
      text,
    });
  }

  // -- the DAG ---------------------------------------------------------------------------
  async function loadDag() {
    try {
      const dag = await S.api("GET", dagPath);
      document.title = dag.dag_id + " · Sluice";
      const changed = !dagTasks || JSON.stringify(dagTasks) !== JSON.stringify(dag.tasks);
      dagTasks = dag.tasks;
      const regrouped = JSON.stringify(dag.groups || []) !== groupsSeen;
      groupsSeen = JSON.stringify(dag.groups || []);
      groupIndex = SluiceGroups.index(dag.groups);
      if (changed || regrouped) graph = null;
      if (regrouped && lastGrid) renderGrid(lastGrid); /* drawn before the groups were known */
      $("title").textContent = dag.dag_id;
      $("crumb").textContent = dag.dag_id;
      $("pause-slot").replaceChildren(S.pauseSwitch(dag.dag_id, dag.is_paused, report));
      $("dag-meta").textContent = [
        "schedule: " + (dag.schedule || "manual only"),
        dag.tasks.length + " task" + (dag.tasks.length === 1 ? "" : "s"),
        "next run: " + S.fmtNextRun(dag),
        "file: " + dag.fileloc,
      ].join(" · ");
      const uses = [];
      if (dag.consumes && dag.consumes.length) uses.push("consumes: " + dag.consumes.join(", "));
      if (dag.produces && dag.produces.length) uses.push("produces: " + dag.produces.join(", "));
      if (dag.watch_error) uses.push("watch error: " + dag.watch_error);
      $("dag-assets").textContent = uses.join(" · ");
      $("dag-assets").hidden = !uses.length;
      showParams(dag.params);
    } catch (e) {
      $("title").textContent = dagId;
      $("crumb").textContent = dagId;
      report(e.message, "error");
      return;
    }
    if (view === "graph" && gridRows() > rowsRead) refresh();
    else showRunView();
  }

  // -- the grid --------------------------------------------------------------------------
  /* A run's duration in seconds: to its end, or to now while it runs; 0 before it starts. */
  function runSeconds(run, now) {
    if (!run.start_date) return 0;
    const end = run.end_date ? new Date(run.end_date).getTime() : now;
    return Math.max(0, (end - new Date(run.start_date).getTime()) / 1000);
  }

  /* The run the run view shows: the one picked, if still in the grid, else the newest. */
  function shownRun(grid) {
    if (!grid || !grid.runs.length) return null;
    return grid.runs.find((r) => r.run_id === pickedRun) || grid.runs[grid.runs.length - 1];
  }

  function runHeader(run, longest, now, shown) {
    const secs = runSeconds(run, now);
    const took = run.start_date ? S.fmtDuration(run.start_date, run.end_date) : "not started";
    const bar = S.el("span", { class: "run-bar state-" + run.state + (run.start_date ? "" : " unstarted"),
                               dataset: { seconds: secs.toFixed(3) } });
    bar.style.height = (run.start_date ? Math.max(3, Math.round((BAR_PX * secs) / (longest || 1))) : 2) + "px";
    const isShown = shown !== null && shown.run_id === run.run_id;
    return S.el("th", { scope: "col", dataset: { run: run.run_id, state: run.state } }, [
      S.el("button", {
        type: "button",
        class: "run-pick" + (isShown ? " selected" : ""),
        "aria-pressed": isShown ? "true" : "false",
        title: run.run_id + " (" + S.fmtTime(run.logical_date) + "): " + S.stateWords(run.state) + ", " + took,
        "aria-label": "Show run " + run.run_id + ": " + S.stateWords(run.state) + ", " + took,
        dataset: { run: run.run_id },
        on: { click: () => pickRun(run.run_id) },
      }, [
        S.el("span", { class: "run-bar-slot", "aria-hidden": "true" }, bar),
        S.el("span", { class: "run-label", text: run.run_id }),
      ]),
      S.chip(run.state, "run " + run.run_id),
      run.version ? versionLink(run, "run-version mono", run.version.short.slice(0, 7)) : null,
    ]);
  }

  function pickRun(runId) {
    if (pickedRun === runId) return;
    pickedRun = runId;
    if (lastGrid) renderGrid(lastGrid);
  }

  /* "3 success, 2 running": a mapped task's indexes counted by state. */
  function countsText(states) {
    return Object.keys(states).sort().map((s) => states[s] + " " + S.stateWords(s)).join(", ");
  }

  /* The states whose usual try is 1 (a compact grid's `tried`), as a Set, once a read. */
  const triedSets = new WeakMap();
  function triedOf(grid) {
    let tried = triedSets.get(grid);
    if (!tried) { tried = new Set(grid.tried); triedSets.set(grid, tried); }
    return tried;
  }

  /* The cell of `row` in a compact grid's run: {state, tryNumber, mapped, states}. A code
     is its state's index in `legend` in base 36 ('0'-'9', then 'a'-'z'), whatever the
     number of states; a row `tries` does not list has try 1 if its state is `tried`. */
  function cellOf(grid, run, row) {
    const code = run.states[row];
    if (code === undefined || code === "-") return { state: "none", tryNumber: 0, mapped: null, states: null };
    const state = grid.legend[parseInt(code, 36)];
    const listed = run.tries[row];
    const m = run.mapped[row];
    return {
      state,
      tryNumber: listed !== undefined ? listed : (triedOf(grid).has(state) ? 1 : 0),
      mapped: m ? m.count : null,
      states: m ? m.states : null,
    };
  }

  function cell(grid, run, row, taskId) {
    const ti = cellOf(grid, run, row);
    const { state, mapped } = ti;
    const words = mapped
      ? mapped + " mapped indexes: " + countsText(ti.states)
      : S.stateWords(state) + (ti.tryNumber > 1 ? ", try " + ti.tryNumber : "");
    const isSelected = selected && selected.runId === run.run_id && selected.taskId === taskId;
    return S.el("td", {}, S.el("button", {
      type: "button",
      class: "cell state-" + state + (mapped ? " mapped" : "") + (isSelected ? " selected" : ""),
      dataset: { task: taskId, run: run.run_id, state, mapped: mapped || "" },
      title: taskId + " in " + run.run_id + ": " + words,
      "aria-label": taskId + " in run " + run.run_id + ": " + words,
      "aria-pressed": isSelected ? "true" : "false",
      text: S.stateAbbr(state) + (mapped ? " ×" + mapped : ""),
      on: { click: () => openPanel(run.run_id, taskId, null, Boolean(mapped)) },
    }));
  }

  function taskRow(grid, taskId, row, depth) {
    const head = S.el("th", { scope: "row", text: taskId });
    if (depth) head.style.paddingLeft = (0.4 + depth * 1.2) + "em";
    return S.el("tr", { dataset: { task: taskId } }, [
      head,
      ...grid.runs.map((run) => cell(grid, run, row, taskId)),
    ]);
  }

  function toggleGroup(groupId) {
    if (openGroups.has(groupId)) openGroups.delete(groupId);
    else openGroups.add(groupId);
    graph = null;
    if (lastGrid) renderGrid(lastGrid);
  }

  /* A group's row: a button that opens or closes it, and in each run one cell, the
     most pressing state of its tasks (the counts of each in its title). */
  function groupRow(grid, groupId, rowOf, depth) {
    const open = openGroups.has(groupId);
    const members = (groupIndex.members.get(groupId) || []).filter((t) => rowOf.has(t));
    const label = groupId + (groupIndex.mapped.has(groupId) ? " (mapped group)" : " (group)");
    const toggle = S.el("button", {
      type: "button", class: "group-toggle", dataset: { group: groupId },
      "aria-expanded": open ? "true" : "false",
      text: (open ? "▾ " : "▸ ") + label,
      on: { click: () => toggleGroup(groupId) },
    });
    const head = S.el("th", { scope: "row" }, toggle);
    if (depth) head.style.paddingLeft = (0.4 + depth * 1.2) + "em";
    const cells = grid.runs.map((run) => {
      const states = members.map((t) => cellOf(grid, run, rowOf.get(t)).state);
      const state = SluiceGroups.aggregate(states);
      const counts = SluiceGroups.countsOf(states);
      const words = groupId + " in " + run.run_id + ": " + countsText(counts);
      return S.el("td", {}, S.el("button", {
        type: "button", class: "cell group-cell state-" + state,
        dataset: { group: groupId, run: run.run_id, state },
        title: words, "aria-label": words, text: S.stateAbbr(state),
        on: { click: () => toggleGroup(groupId) },
      }));
    });
    return S.el("tr", { class: "group-row", dataset: { group: groupId } }, [head, ...cells]);
  }

  /* The grid's rows: each task's, under a row for each group it is in (before the
     group's first task), hidden while one of its groups is closed. */
  function gridBody(grid, rows) {
    if (groupIndex.empty) return rows.map((taskId, row) => taskRow(grid, taskId, row, 0));
    const rowOf = new Map(rows.map((t, i) => [t, i]));
    const out = [];
    const headed = new Set();
    rows.forEach((taskId, row) => {
      const chain = groupIndex.chainOf(taskId);
      for (let depth = 0; depth < chain.length; depth++) {
        const g = chain[depth];
        if (!headed.has(g)) { headed.add(g); out.push(groupRow(grid, g, rowOf, depth)); }
        if (!openGroups.has(g)) return;
      }
      out.push(taskRow(grid, taskId, row, chain.length));
    });
    return out;
  }

  function renderGrid(grid) {
    const active = document.activeElement;
    const refocus = active && active.classList && active.classList.contains("cell")
      ? [active.dataset.task, active.dataset.run] : null;
    const thead = document.querySelector("#grid thead");
    const tbody = document.querySelector("#grid tbody");
    const now = Date.now();
    const longest = Math.max(0, ...grid.runs.map((r) => runSeconds(r, now)));
    const shown = shownRun(grid);
    thead.replaceChildren(S.el("tr", {}, [
      S.el("th", { scope: "col", class: "visually-hidden", text: "Task" }),
      ...grid.runs.map((run) => runHeader(run, longest, now, shown)),
    ]));
    const rows = grid.task_ids.slice(0, shownRows); /* the API sends gridRows() at most */
    tbody.replaceChildren(...gridBody(grid, rows));
    const hidden = grid.rows_total - rows.length;
    $("grid-more").hidden = hidden <= 0;
    $("grid-more-text").textContent = hidden > 0
      ? "Showing " + rows.length + " of " + grid.rows_total + " tasks." : "";
    $("grid-more-button").textContent = "Show " + Math.min(ROWS_STEP, hidden) + " more";
    $("no-runs").hidden = grid.runs.length > 0;
    if (refocus) {
      const again = tbody.querySelector('button[data-task="' + CSS.escape(refocus[0]) + '"][data-run="' + CSS.escape(refocus[1]) + '"]');
      if (again) again.focus();
    }
    if (active && active.classList && active.classList.contains("run-pick")) {
      const again = thead.querySelector('button.run-pick[data-run="' + CSS.escape(active.dataset.run) + '"]');
      if (again) again.focus();
    }
    if (active && active.classList && active.classList.contains("run-version")) {
      const again = thead.querySelector('a.run-version[data-run="' + CSS.escape(active.dataset.run) + '"]');
      if (again) again.focus();
    }
    lastGrid = grid;
    showRunView();
  }

  /* The rows the grid read must cover: those shown, and while the graph is shown every
     task of a DAG it can draw. */
  function gridRows() {
    const drawable = view === "graph" && dagTasks && !SluiceGraph.tooBig(dagTasks) ? dagTasks.length : 0;
    return Math.max(shownRows, drawable);
  }

  // -- the run view: graph and Gantt chart -----------------------------------------------
  function showRunView() {
    const run = shownRun(lastGrid);
    $("run-view-run").textContent = run
      ? run.run_id + " · " + S.stateWords(run.state) + (run.start_date ? " · " + S.fmtDuration(run.start_date, run.end_date) : "")
      : "(no run yet)";
    showRunVersion(run);
    if (view === "graph") showGraph(run);
    else showGantt(run);
  }

  /* "Version <short sha> <subject>" of the shown run (a git bundle's DAG), as text. */
  function showRunVersion(run) {
    const line = $("run-view-version");
    const version = run && run.version;
    const key = version ? run.run_id + " " + version.sha + " " + (run.bundle_version || "") : "";
    if (line.dataset.key === key) return; /* unchanged: a focused link stays focused */
    line.dataset.key = key;
    line.hidden = !version;
    line.replaceChildren(...(version ? [
      "Version ", versionLink(run, "mono", version.short), " " + version.subject,
      run.bundle_version && run.bundle_version !== version.sha
        ? " (the run's commit " + run.bundle_version.slice(0, 12) + " did not change the DAG)" : "",
    ] : []));
  }

  /* The graph of the run: each closed task group is one box (click: it opens, its
     tasks drawn instead); a task's box opens its panel. */
  function showGraph(run) {
    const note = $("graph-note");
    if (!dagTasks) { note.textContent = "Loading the DAG…"; return; }
    const refused = SluiceGraph.tooBig(dagTasks);
    if (refused) {
      note.textContent = refused;
      $("graph").replaceChildren();
      graph = null;
      return;
    }
    const drawn = groupIndex.empty ? dagTasks : SluiceGroups.collapsed(dagTasks, groupIndex, openGroups);
    if (!graph) {
      graph = SluiceGraph.draw($("graph"), drawn, (taskId, mapped) => {
        if (taskId.startsWith(SluiceGroups.GROUP_PREFIX)) {
          toggleGroup(taskId.slice(SluiceGroups.GROUP_PREFIX.length));
          return;
        }
        const current = shownRun(lastGrid);
        if (current) openPanel(current.run_id, taskId, null, mapped);
      });
    }
    const rowOf = new Map((lastGrid ? lastGrid.task_ids : []).map((id, i) => [id, i]));
    const none = { state: "none", tryNumber: 0, mapped: null, states: null };
    const cellIn = (taskId) => (run && rowOf.has(taskId) ? cellOf(lastGrid, run, rowOf.get(taskId)) : none);
    const groupCell = (groupId) => {
      const states = (groupIndex.members.get(groupId) || []).map((t) => cellIn(t).state);
      return { state: SluiceGroups.aggregate(states), tryNumber: 0, mapped: null, states: null };
    };
    graph.paint((taskId) => (taskId.startsWith(SluiceGroups.GROUP_PREFIX)
      ? groupCell(taskId.slice(SluiceGroups.GROUP_PREFIX.length)) : cellIn(taskId)),
      run ? run.run_id : "", selected && run && selected.runId === run.run_id ? selected.taskId : null);
    note.textContent = dagTasks.length + " task" + (dagTasks.length === 1 ? "" : "s") + ", " +
      graph.edges + " dependenc" + (graph.edges === 1 ? "y" : "ies") + ". " +
      (run ? "Each task in its state in run " + run.run_id + "; click one to open it."
        : "No run yet: the tasks have no state.");
  }

  let ganttCall = 0;
  async function showGantt(run) {
    const note = $("gantt-note");
    if (!run) {
      ganttDone = null;
      note.textContent = "No run yet.";
      $("gantt").replaceChildren();
      return;
    }
    if (ganttDone === run.run_id && !RUN_ACTIVE.has(run.state)) return; /* unless cleared since */
    const call = ++ganttCall;
    const finished = !RUN_ACTIVE.has(run.state);
    let data;
    try {
      data = await S.api("GET", dagPath + "/runs/" + encodeURIComponent(run.run_id) + "/tries?limit=" + GANTT_ROWS);
    } catch (e) {
      if (call === ganttCall) S.setStatus(note, e.message, "error");
      return;
    }
    if (call !== ganttCall || view !== "gantt") return;
    const focused = document.activeElement && document.activeElement.closest("#gantt tr");
    const drawn = SluiceGantt.render($("gantt"), data, (taskId, mapIndex) =>
      openPanel(run.run_id, taskId, null, mapIndex !== null, mapIndex));
    if (focused) {
      const again = $("gantt").querySelector('tr[data-task="' + CSS.escape(focused.dataset.task) + '"][data-index="' +
        CSS.escape(focused.dataset.index) + '"] button');
      if (again) again.focus();
    }
    const listed = data.task_instances.reduce((n, ti) => n + ti.tries.length, 0);
    S.setStatus(note, "Run " + data.run_id + ": " + data.total + " task instance" + (data.total === 1 ? "" : "s") +
      ", " + listed + " tr" + (listed === 1 ? "y" : "ies") + " (" + drawn + " with times). Each bar is a try: " +
      "hatched while queued, then coloured by its state until it ended; an earlier try's outcome and queue time are not kept." +
      (data.total > data.task_instances.length ? " Showing the first " + data.task_instances.length + " of " +
        data.total + " task instances (GET …/tries?offset=" + data.task_instances.length + " has the rest)." : ""));
    ganttDone = finished && !RUN_ACTIVE.has(data.state) ? run.run_id : null;
  }

  function pickView(next) {
    view = next;
    for (const [name, tab, panel] of [["graph", "tab-graph", "graph-view"], ["gantt", "tab-gantt", "gantt-view"]]) {
      $(tab).setAttribute("aria-selected", name === view ? "true" : "false");
      $(tab).tabIndex = name === view ? 0 : -1;
      $(panel).hidden = name !== view;
    }
    ganttDone = null;
    if (view === "graph" && gridRows() > rowsRead) refresh();
    else showRunView();
  }
  $("tab-graph").addEventListener("click", () => pickView("graph"));
  $("tab-gantt").addEventListener("click", () => pickView("gantt"));
  $("run-tabs").addEventListener("keydown", (event) => {
    if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
    pickView(view === "graph" ? "gantt" : "graph");
    $(view === "graph" ? "tab-graph" : "tab-gantt").focus();
  });

  $("grid-more-button").addEventListener("click", () => {
    shownRows += ROWS_STEP;
    refresh(); /* reads the grid's next rows (the current answer is superseded) */
  });

  /* One polling loop: a newer call supersedes an older one still waiting for its answer,
     so answers are never rendered out of order and only the newest call sets the timer. */
  let gridCall = 0;
  async function refresh() {
    clearTimeout(timer);
    const call = ++gridCall;
    let active = false;
    try {
      const asked = gridRows();
      const grid = await S.api(
        "GET", dagPath + "/grid?format=compact&limit=" + GRID_RUNS + "&rows=" + asked);
      if (call !== gridCall) return;
      rowsRead = asked;
      renderGrid(grid);
      active = grid.active;
      if (status.classList.contains("error")) report("");
      if (selected && !selected.finished) await loadPanel(false);
    } catch (e) {
      if (call !== gridCall) return;
      report(e.message, "error");
    }
    if (call !== gridCall) return;
    $("refresh-state").textContent = active ? "(refreshing while runs are active)" : "";
    timer = setTimeout(refresh, active ? ACTIVE_MS : IDLE_MS);
  }

  // -- trigger ---------------------------------------------------------------------------
  /* The trigger form: with params (the DAG's JSON Schema, `dag.params`), one field per
     param (a number input for an integer or a number, a select for an enum, a checkbox
     for a boolean, a JSON text area for an object or an array, else a text input, a date
     picker for format "date"), its default filled in, its type and description said;
     the conf sent is their values, typed. "Edit the conf as raw JSON" swaps the fields
     for the conf's text area (filled with the fields' values, keeping its other keys),
     whose JSON object is then sent as it is. Without params, the text area alone. The
     API checks the conf against the params and answers a refusal in one line. */
  let paramsKey = null; /* the params' schema the fields were built from, as JSON */
  let paramFields = []; /* {name, schema, required, input} of each field shown */

  function mainType(schema) {
    const type = schema.type;
    if (Array.isArray(type)) return type.find((t) => t !== "null") || null;
    return typeof type === "string" ? type : null;
  }

  function shown(value) { return typeof value === "string" ? value : JSON.stringify(value); }

  function paramInput(id, schema, type, required) {
    const hasDefault = Object.prototype.hasOwnProperty.call(schema, "default");
    const value = schema.default;
    if (Array.isArray(schema.enum)) {
      const options = schema.enum.map((choice, i) => S.el("option", {
        value: String(i), text: shown(choice),
        selected: hasDefault && JSON.stringify(choice) === JSON.stringify(value),
      }));
      const none = hasDefault ? [] : [S.el("option", { value: "", text: "(choose)" })];
      return S.el("select", { id }, [...none, ...options]);
    }
    if (type === "boolean") return S.el("input", { id, type: "checkbox", checked: value === true });
    if (type === "integer" || type === "number") {
      return S.el("input", {
        id, type: "number", step: type === "integer" ? "1" : "any",
        min: typeof schema.minimum === "number" ? schema.minimum : null,
        max: typeof schema.maximum === "number" ? schema.maximum : null,
        value: hasDefault && typeof value === "number" ? String(value) : null,
        required,
      });
    }
    if (type === "object" || type === "array") {
      const area = S.el("textarea", { id, rows: "2", spellcheck: "false", required });
      if (hasDefault) area.value = JSON.stringify(value);
      return area;
    }
    const input = S.el("input", {
      id, type: schema.format === "date" ? "date" : "text", autocomplete: "off",
      spellcheck: "false", required,
    });
    if (hasDefault) input.value = shown(value);
    return input;
  }

  /* The words beside a param's name: its type and rules, and whether it is required. */
  function paramHint(schema, type, required) {
    const words = [];
    if (Array.isArray(schema.enum)) words.push("one of " + schema.enum.map(shown).join(", "));
    else if (type) words.push(type);
    if (schema.format) words.push(schema.format);
    if (typeof schema.minimum === "number") words.push("≥ " + schema.minimum);
    if (typeof schema.maximum === "number") words.push("≤ " + schema.maximum);
    if (type === "object" || type === "array") words.push("JSON");
    words.push(required ? "required" : "default " + shown(schema.default));
    return words.join(", ");
  }

  function showParams(params) {
    const properties = (params && params.properties) || {};
    const names = Object.keys(properties);
    const key = JSON.stringify(params || null);
    if (key === paramsKey) return;
    paramsKey = key;
    const required = new Set((params && params.required) || []);
    paramFields = names.map((name, i) => {
      const schema = properties[name] || {};
      const type = mainType(schema);
      const id = "param-" + i;
      const input = paramInput(id, schema, type, required.has(name));
      input.dataset.param = name;
      const help = schema.description
        ? S.el("p", { id: id + "-help", class: "param-help muted small", text: schema.description })
        : null;
      if (help) input.setAttribute("aria-describedby", help.id);
      const label = S.el("label", { for: id }, [
        S.el("span", { class: "mono", text: name }), " ",
        S.el("span", { class: "muted small", text: "(" + paramHint(schema, type, required.has(name)) + ")" }),
      ]);
      const row = type === "boolean" && !Array.isArray(schema.enum)
        ? S.el("div", { class: "param-field" }, [S.el("div", { class: "check" }, [input, label]), help])
        : S.el("div", { class: "param-field" }, [label, input, help]);
      return { name, schema, type, required: required.has(name), input, row };
    });
    const legend = $("param-fields").querySelector("legend");
    $("param-fields").replaceChildren(legend, ...paramFields.map((f) => f.row));
    $("params-box").hidden = !names.length;
    $("conf-raw").checked = false;
    showRaw();
  }

  /* The form's fields or the raw text area, as "raw JSON" says (always the text area
     for a DAG without params). */
  function showRaw() {
    const raw = !paramFields.length || $("conf-raw").checked;
    $("param-fields").hidden = raw;
    $("conf-box").hidden = !raw;
  }

  class FieldError extends Error {
    constructor(message, input) { super(message); this.input = input; }
  }

  /* The fields' values, typed: a number input's as a number, a select's as its choice,
     JSON as parsed; an empty field is left out (its default applies). */
  function paramValues() {
    const values = {};
    for (const field of paramFields) {
      const { name, schema, type, input } = field;
      if (Array.isArray(schema.enum)) {
        if (input.value !== "") values[name] = schema.enum[Number(input.value)];
      } else if (type === "boolean") {
        values[name] = input.checked;
      } else if (type === "integer" || type === "number") {
        const text = input.value.trim();
        if (text !== "") {
          const number = Number(text);
          if (!Number.isFinite(number)) throw new FieldError("Param " + name + " is not a number", input);
          values[name] = number;
        }
      } else if (type === "object" || type === "array") {
        const text = input.value.trim();
        if (text !== "") {
          try { values[name] = JSON.parse(text); } catch (e) {
            throw new FieldError("Param " + name + " is not valid JSON: " + e.message, input);
          }
        }
      } else if (input.value !== "" || Object.prototype.hasOwnProperty.call(schema, "default")) {
        values[name] = input.value;
      }
    }
    return values;
  }

  /* The raw text area's JSON object; a FieldError saying what is wrong with it. */
  function rawConf() {
    const text = $("conf").value.trim();
    if (!text) return {};
    let conf;
    try { conf = JSON.parse(text); } catch (e) {
      throw new FieldError("Conf is not valid JSON: " + e.message, $("conf"));
    }
    if (conf === null || typeof conf !== "object" || Array.isArray(conf)) {
      throw new FieldError("Conf must be a JSON object, e.g. {\"key\": 1}", $("conf"));
    }
    return conf;
  }

  /* Set the fields from a conf's params (those it gives; the others keep their value). */
  function fillFields(conf) {
    for (const { name, schema, type, input } of paramFields) {
      if (!Object.prototype.hasOwnProperty.call(conf, name)) continue;
      const value = conf[name];
      if (Array.isArray(schema.enum)) {
        const i = schema.enum.findIndex((c) => JSON.stringify(c) === JSON.stringify(value));
        if (i >= 0) input.value = String(i);
      } else if (type === "boolean") input.checked = value === true;
      else if (type === "object" || type === "array") input.value = JSON.stringify(value);
      else input.value = shown(value);
    }
  }

  $("conf-raw").addEventListener("change", () => {
    const out = $("trigger-result");
    try {
      if ($("conf-raw").checked) {
        let others = {};
        try { others = rawConf(); } catch (e) { others = {}; }
        $("conf").value = JSON.stringify({ ...others, ...paramValues() }, null, 2);
      } else {
        fillFields(rawConf());
      }
      S.setStatus(out, "");
    } catch (e) {
      $("conf-raw").checked = !$("conf-raw").checked; /* stay where the error is */
      S.setStatus(out, e.message, "error");
      if (e.input) e.input.focus();
    }
    showRaw();
  });

  $("trigger-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const out = $("trigger-result");
    const body = {};
    const runId = $("run-id").value.trim();
    const logicalDate = $("logical-date").value.trim();
    const version = $("version").value.trim();
    if (runId) body.run_id = runId;
    if (version) body.version = version;
    if (logicalDate) body.logical_date = logicalDate;
    try {
      const conf = $("conf-box").hidden ? paramValues() : rawConf();
      if (Object.keys(conf).length) body.conf = conf;
    } catch (e) {
      S.setStatus(out, e.message, "error");
      if (e.input) e.input.focus();
      return;
    }
    const button = event.submitter || event.target.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const run = await S.api("POST", dagPath + "/runs", body);
      S.setStatus(out, "Triggered run " + run.run_id + " (" + run.state + ")" +
        (run.version ? " at version " + run.version.short : ""), "ok");
      $("run-id").value = "";
      $("logical-date").value = "";
      $("version").value = "";
      await refresh();
    } catch (e) {
      S.setStatus(out, e.message, "error");
    } finally {
      button.disabled = false;
    }
  });

  // -- the task-instance panel -----------------------------------------------------------
  function openPanel(runId, taskId, tryNumber, mapped, mapIndex) {
    selected = { runId, taskId, tryNumber, finished: false, mapped: Boolean(mapped),
                 mapIndex: mapIndex === undefined ? null : mapIndex };
    if (pickedRun !== runId) {
      pickedRun = runId;
      if (lastGrid) renderGrid(lastGrid); /* the run's header is pressed; the run view shows it */
    } else if (view === "graph") {
      showRunView(); /* the graph marks the task opened */
    }
    document.querySelectorAll("#grid .cell.selected").forEach((node) => {
      node.classList.remove("selected");
      node.setAttribute("aria-pressed", "false");
    });
    const node = document.querySelector('#grid .cell[data-task="' + CSS.escape(taskId) + '"][data-run="' + CSS.escape(runId) + '"]');
    if (node) { node.classList.add("selected"); node.setAttribute("aria-pressed", "true"); }
    $("panel").hidden = false;
    $("panel-indexes-title").hidden = $("panel-indexes").hidden = !mapped;
    $("panel-indexes").replaceChildren();
    $("clear-result").textContent = "";
    $("ops-result").textContent = "";
    $("event-result").textContent = "";
    $("event-payload").value = "";
    $("note-text").value = "";
    $("run-note-text").value = "";
    disarmAll();
    loadPanel(true);
  }

  function fact(term, value, mono) {
    return [S.el("dt", { text: term }), S.el("dd", { class: mono ? "mono" : null, text: value === null || value === undefined || value === "" ? "—" : String(value) })];
  }

  let panelCall = 0;
  async function loadPanel(first) {
    if (!selected) return;
    const want = selected;
    const call = ++panelCall;
    const tiPath = tiPathOf(want);
    let ti;
    try {
      if (want.mapped) await loadIndexes(want, call);
      if (want.mapped && want.mapIndex === null) return;
      ti = await S.api("GET", tiPath + indexQuery(want, "?"));
    } catch (e) {
      if (first && call === panelCall) S.setStatus($("panel-state"), e.message, "error");
      return;
    }
    if (selected !== want || call !== panelCall) return;
    $("panel-title").textContent = ti.task_id + (ti.map_index !== null ? " [" + ti.map_index + "]" : "") +
      " · " + ti.run_id;
    $("panel-state").replaceChildren(S.chip(ti.state, "state"), " ", S.stateWords(ti.state),
      ti.try_number ? " — try " + ti.try_number + " of " + ti.max_tries : "");
    $("panel-facts").replaceChildren(
      ...fact("Queue", ti.queue), ...fact("Pool", ti.pool), ...fact("Hostname", ti.hostname),
      ...fact("Attempt id", ti.attempt_id, true),
      ...fact("Scheduled", S.fmtTime(ti.scheduled_at)), ...fact("Queued", S.fmtTime(ti.queued_at)),
      ...fact("Started", S.fmtTime(ti.start_date)), ...fact("Ended", S.fmtTime(ti.end_date)),
      ...fact("Duration", S.fmtDuration(ti.start_date, ti.end_date)),
      ...(ti.next_retry_at ? fact(ti.state === "up_for_reschedule" ? "Next poke" : "Next retry",
        S.fmtTime(ti.next_retry_at)) : []),
      ...fact("Upstream", ti.upstream.join(", ")), ...fact("Downstream", ti.downstream.join(", ")),
      ...(ti.result != null ? fact("Result", ti.result + (ti.result_truncated ? " …" : ""), true) : []),
    );
    $("panel-why").hidden = !ti.why;
    $("panel-why").replaceChildren(...(ti.why ? [S.el("strong", { text: "Why: " }), ti.why] : []));
    showTrigger(ti.trigger);
    showNote($("panel-note"), "Note", ti.note);
    S.api("GET", dagPath + "/runs/" + encodeURIComponent(want.runId)).then((run) => {
      if (selected === want && call === panelCall) showNote($("panel-run-note"), "Run note", run.note);
    }, () => {});
    $("panel-error").hidden = !ti.error;
    $("panel-error").textContent = ti.error ? "Error: " + ti.error : "";
    $("panel-trace").hidden = !ti.trace_url;
    if (ti.trace_url) $("trace-link").href = ti.trace_url;

    const current = want.tryNumber || ti.try_number || null;
    $("tries").replaceChildren(...(ti.tries.length ? ti.tries.map((t) => S.el("li", {}, S.el("button", {
      type: "button",
      "aria-pressed": t.try_number === current ? "true" : "false",
      dataset: { try: t.try_number },
      text: "Try " + t.try_number + (t.state ? " (" + S.stateWords(t.state) + ")" : "") + " · " +
            (t.hostname || "no host yet") + " · " + S.fmtTime(t.started_at) + " → " + S.fmtTime(t.finished_at) +
            (t.attempt_id ? " · attempt " + t.attempt_id : ""),
      on: { click: () => { selected.tryNumber = t.try_number; selected.finished = false; loadPanel(false); } },
    }))) : [S.el("li", { class: "muted", text: "Not run yet." })]));
    const logDone = await loadLog(tiPath, current, () => call === panelCall, indexQuery(want, "&"));
    if (selected === want && call === panelCall) want.finished = S.TERMINAL.has(ti.state) && logDone;
  }

  /* A deferred TI's trigger (class, arguments, since, until), as text; an Event trigger's
     key arms the Approve and Reject buttons, which send the event on it. */
  let eventKey = null;
  function showTrigger(trigger) {
    $("panel-trigger").hidden = !trigger;
    eventKey = trigger && typeof trigger.event_key === "string" ? trigger.event_key : null;
    $("event-actions").hidden = eventKey === null;
    $("trigger-facts").replaceChildren(...(trigger ? [
      ...fact("Trigger", trigger.classpath, true),
      ...fact("Arguments", JSON.stringify(trigger.kwargs), true),
      ...fact("Since", S.fmtTime(trigger.since)),
      ...fact("Until", trigger.until ? S.fmtTime(trigger.until) + " (then it fails)" : "no timeout"),
    ] : []));
  }

  /* The payload Approve sends: {"approved": true} with the typed object's keys, or null
     (said in `out`) if what was typed is not a JSON object. */
  function approvalPayload(out) {
    const text = $("event-payload").value.trim();
    if (!text) return { approved: true };
    let typed;
    try { typed = JSON.parse(text); } catch (e) {
      S.setStatus(out, "Payload is not valid JSON: " + e.message, "error");
      $("event-payload").focus();
      return null;
    }
    if (typed === null || typeof typed !== "object" || Array.isArray(typed)) {
      S.setStatus(out, "Payload must be a JSON object, e.g. {\"reason\": \"checked\"}", "error");
      $("event-payload").focus();
      return null;
    }
    return Object.assign({}, typed, { approved: true });
  }

  async function sendEvent(approved) {
    const key = eventKey;
    const out = $("event-result");
    if (key === null || !selected) return;
    const payload = approved ? approvalPayload(out) : { approved: false };
    if (payload === null) return;
    const buttons = [$("event-approve"), $("event-reject")];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await operate(out, () => S.api("POST", "/events", { key, payload }), (answer) =>
        (approved ? "Approved" : "Rejected") + " (event " + key + "): resumed " + answer.resumed +
        " task instance(s).");
      if (approved && !out.classList.contains("error")) $("event-payload").value = "";
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  /* A note (or none) as "<label> (who, when): text", as text, never as markup. */
  function showNote(p, label, note) {
    p.hidden = !note;
    p.replaceChildren(...(note ? [S.el("strong", { text: label + " (" + note.who + ", " +
      S.fmtTime(note.at) + "): " }), note.note] : []));
  }

  const SHOWN_INDEXES = 500;  /* one page of GET …/tasks at its largest limit */

  /* `?map_index=i` (or `&…`) when a mapped task's index is selected, else nothing. */
  function indexQuery(sel, sep) {
    return sel.mapIndex === null || sel.mapIndex === undefined ? "" : sep + "map_index=" + sel.mapIndex;
  }

  /* A mapped task's indexes, one button each (its state); the first is selected at first. */
  async function loadIndexes(want, call) {
    const list = $("panel-indexes");
    const page = await S.api("GET", runPathOf(want) + "/tasks?limit=" + SHOWN_INDEXES + "&task_id=" +
      encodeURIComponent(want.taskId));
    if (selected !== want || call !== panelCall) return;
    const tis = page.task_instances;
    const indexes = tis.filter((t) => t.map_index !== null);
    if (want.mapIndex === null && indexes.length) want.mapIndex = indexes[0].map_index;
    const more = page.total - tis.length;
    $("panel-indexes-title").hidden = list.hidden = false;
    list.replaceChildren(...(indexes.length ? indexes.map((t) => S.el("li", {}, S.el("button", {
      type: "button",
      class: "index state-" + t.state,
      "aria-pressed": t.map_index === want.mapIndex ? "true" : "false",
      dataset: { index: t.map_index, state: t.state },
      text: "[" + t.map_index + "] " + S.stateWords(t.state) + (t.try_number > 1 ? ", try " + t.try_number : ""),
      on: { click: () => { want.mapIndex = t.map_index; want.tryNumber = null; want.finished = false; loadPanel(false); } },
    }))) : [S.el("li", { class: "muted", text: "Not expanded yet (" + tis.map((t) => S.stateWords(t.state)).join(", ") + ")." })]),
      ...(more > 0 ? [S.el("li", { class: "muted", text: "and " + more + " more (the API pages through them: " +
        "GET …/tasks?task_id=" + want.taskId + "&offset=" + SHOWN_INDEXES + ")" })] : []));
  }

  /* Show one try's log; true if it will not change any more. */
  async function loadLog(tiPath, tryNumber, current, query) {
    const pre = $("log");
    if (!tryNumber) {
      $("log-meta").textContent = "";
      pre.textContent = "No try yet.";
      return true;
    }
    try {
      const log = await S.api("GET", tiPath + "/logs?try_number=" + tryNumber + (query || ""));
      if (!current()) return false;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      const dropped = log.dropped_lines ? "… " + log.dropped_lines + " earlier lines were dropped (size cap)\n" : "";
      pre.textContent = dropped + (log.content || (log.started_at ? "(no output)" : "(nothing stored yet)"));
      $("log-meta").textContent = "Try " + log.try_number + (log.hostname ? " on " + log.hostname : "") +
        (log.finished_at ? ", finished " + S.fmtTime(log.finished_at) : log.started_at ? ", still running" : "");
      if (atBottom) pre.scrollTop = pre.scrollHeight;
      return Boolean(log.finished_at) || !log.started_at;
    } catch (e) {
      if (current()) pre.textContent = e.message;
      return true;
    }
  }

  /* Buttons that act on a second click within 5 s; the first click says what will happen. */
  const disarms = [];
  function disarmAll() { disarms.forEach((disarm) => disarm()); }
  function confirmed(button, what, act) {
    const label = button.textContent;
    let armed = null;
    const disarm = () => { clearTimeout(armed); armed = null; button.textContent = label; };
    disarms.push(disarm);
    button.addEventListener("click", async () => {
      if (!selected) return;
      if (!armed) {
        disarmAll();
        button.textContent = "Click again to " + what();
        armed = setTimeout(disarm, 5000);
        return;
      }
      disarm();
      await act();
    });
  }

  function tiPathOf(sel) {
    return dagPath + "/runs/" + encodeURIComponent(sel.runId) + "/tasks/" + encodeURIComponent(sel.taskId);
  }
  function runPathOf(sel) { return dagPath + "/runs/" + encodeURIComponent(sel.runId); }

  async function operate(out, call, said) {
    try {
      const answer = await call();
      S.setStatus(out, said(answer), "ok");
      selected.tryNumber = null;
      selected.finished = false;
      ganttDone = null;
      await refresh();
    } catch (e) {
      S.setStatus(out, e.message, "error");
    }
  }

  function clearBody(sel) {
    const body = { downstream: $("clear-downstream").checked };
    if (sel.mapIndex !== null && sel.mapIndex !== undefined) body.map_index = sel.mapIndex;
    return body;
  }
  const whichTi = (sel) => sel.taskId + (sel.mapIndex !== null && sel.mapIndex !== undefined ? " [" + sel.mapIndex + "]" : "");
  confirmed($("clear"), () => "clear " + whichTi(selected), () => operate($("clear-result"),
    () => S.api("POST", tiPathOf(selected) + "/clear", clearBody(selected)),
    (out) => "Cleared " + out.cleared + " task instance(s); the run is " + out.run_state + "."));

  /* An Event trigger's buttons: Approve at once, Reject on a second click. */
  $("event-approve").addEventListener("click", () => sendEvent(true));
  confirmed($("event-reject"), () => "reject (send event " + eventKey + ")", () => sendEvent(false));

  for (const id of ["mark-success", "mark-failed", "mark-skipped"]) {
    const state = $(id).dataset.state;
    confirmed($(id), () => "mark " + selected.taskId + " " + state, () => operate($("clear-result"),
      () => S.api("POST", tiPathOf(selected) + "/mark", {
        state, downstream: $("clear-downstream").checked, upstream: $("mark-upstream").checked,
      }),
      (out) => "Marked " + out.marked.length + " task instance(s) " + state + " (" + out.marked.join(", ") +
        "); " + out.stopped + " running tries stopped; the run is " + out.run_state + "."));
  }

  confirmed($("run-cancel"), () => "cancel run " + selected.runId, () => operate($("ops-result"),
    () => S.api("POST", runPathOf(selected) + "/cancel"),
    (run) => "Cancelled run " + run.run_id + ": it is " + run.state + "."));

  for (const id of ["run-mark-success", "run-mark-failed"]) {
    const state = $(id).dataset.state;
    confirmed($(id), () => "mark run " + selected.runId + " " + state, () => operate($("ops-result"),
      () => S.api("POST", runPathOf(selected) + "/mark", { state }),
      (out) => "Marked the run " + out.run_state + " with " + out.marked.length + " task instance(s); " +
        out.stopped + " running tries stopped."));
  }

  function noteForm(form, input, pathOf, what) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!selected) return;
      try {
        await S.api("PUT", pathOf(selected) + "/note", { note: input.value });
        S.setStatus($("ops-result"), "Saved the note on " + what() + ".", "ok");
        input.value = "";
        loadPanel(false);
      } catch (e) {
        S.setStatus($("ops-result"), e.message, "error");
      }
    });
  }
  noteForm($("note-form"), $("note-text"), tiPathOf, () => "task " + selected.taskId);
  noteForm($("run-note-form"), $("run-note-text"), runPathOf, () => "run " + selected.runId);

  $("panel-close").addEventListener("click", () => {
    selected = null;
    $("panel").hidden = true;
    if (view === "graph") showRunView();
    document.querySelectorAll("#grid .cell.selected").forEach((node) => {
      node.classList.remove("selected");
      node.setAttribute("aria-pressed", "false");
    });
  });

  S.legend($("legend"));
  S.initTokenForm(() => { loadDag(); refresh(); });
  loadDag();
  refresh();
})();
