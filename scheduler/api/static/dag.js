/* `/dags/{dag_id}`: the grid of runs by tasks, the trigger form and the task panel.

   The grid refreshes every ACTIVE_MS while a run is queued or running, else every IDLE_MS;
   an open panel refreshes with it until its try has finished. It reads the compact grid
   (one string of state codes per run) of its first `shownRows` rows only: a DAG of
   10,000 tasks is neither read whole nor drawn as 250,000 cells at each refresh; "Show
   more" adds ROWS_STEP rows and reads them. */
"use strict";

(() => {
  const S = Sluice;
  const ACTIVE_MS = 1500;
  const IDLE_MS = 10000;
  const GRID_RUNS = 25;
  const ROWS_STEP = 200;
  const TRIED = new Set(["queued", "running", "success", "failed", "up_for_retry"]);
  const dagId = decodeURIComponent(window.location.pathname.split("/")[2] || "");
  const dagPath = "/dags/" + encodeURIComponent(dagId);
  const $ = (id) => document.getElementById(id);
  const status = $("status");
  let timer = null;
  let selected = null; /* {runId, taskId, tryNumber (null: current), finished} */
  let shownRows = ROWS_STEP; /* kept across refreshes; grows with "Show more" */

  function report(text, kind) { S.setStatus(status, text, kind); }

  // -- the DAG ---------------------------------------------------------------------------
  async function loadDag() {
    try {
      const dag = await S.api("GET", dagPath);
      document.title = dag.dag_id + " · Sluice";
      $("title").textContent = dag.dag_id;
      $("crumb").textContent = dag.dag_id;
      $("pause-slot").replaceChildren(S.pauseSwitch(dag.dag_id, dag.is_paused, report));
      $("dag-meta").textContent = [
        "schedule: " + (dag.schedule || "manual only"),
        dag.tasks.length + " task" + (dag.tasks.length === 1 ? "" : "s"),
        "next run: " + S.fmtTime(dag.next_dagrun),
        "file: " + dag.fileloc,
      ].join(" · ");
    } catch (e) {
      $("title").textContent = dagId;
      $("crumb").textContent = dagId;
      report(e.message, "error");
    }
  }

  // -- the grid --------------------------------------------------------------------------
  function runHeader(run) {
    return S.el("th", { scope: "col", dataset: { run: run.run_id, state: run.state } }, [
      S.el("div", { class: "run-label", title: run.run_id + " (" + S.fmtTime(run.logical_date) + ")",
                    text: run.run_id }),
      S.chip(run.state, "run " + run.run_id),
    ]);
  }

  /* "3 success, 2 running": a mapped task's indexes counted by state. */
  function countsText(states) {
    return Object.keys(states).sort().map((s) => states[s] + " " + S.stateWords(s)).join(", ");
  }

  /* The cell of `row` in a compact grid's run: {state, tryNumber, mapped, states}. */
  function cellOf(grid, run, row) {
    const code = run.states[row];
    if (code === undefined || code === "-") return { state: "none", tryNumber: 0, mapped: null, states: null };
    const state = grid.legend[parseInt(code, 36)];
    const listed = run.tries[row];
    const m = run.mapped[row];
    return {
      state,
      tryNumber: listed !== undefined ? listed : (TRIED.has(state) ? 1 : 0),
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

  function renderGrid(grid) {
    const active = document.activeElement;
    const refocus = active && active.classList && active.classList.contains("cell")
      ? [active.dataset.task, active.dataset.run] : null;
    const thead = document.querySelector("#grid thead");
    const tbody = document.querySelector("#grid tbody");
    thead.replaceChildren(S.el("tr", {}, [
      S.el("th", { scope: "col", class: "visually-hidden", text: "Task" }),
      ...grid.runs.map(runHeader),
    ]));
    const rows = grid.task_ids.slice(0, shownRows); /* the API sends `shownRows` at most */
    tbody.replaceChildren(...rows.map((taskId, row) => S.el("tr", { dataset: { task: taskId } }, [
      S.el("th", { scope: "row", text: taskId }),
      ...grid.runs.map((run) => cell(grid, run, row, taskId)),
    ])));
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
  }

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
      const grid = await S.api(
        "GET", dagPath + "/grid?format=compact&limit=" + GRID_RUNS + "&rows=" + shownRows);
      if (call !== gridCall) return;
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
  $("trigger-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const out = $("trigger-result");
    const body = {};
    const runId = $("run-id").value.trim();
    const logicalDate = $("logical-date").value.trim();
    const confText = $("conf").value.trim();
    if (runId) body.run_id = runId;
    if (logicalDate) body.logical_date = logicalDate;
    if (confText) {
      let conf;
      try { conf = JSON.parse(confText); } catch (e) {
        S.setStatus(out, "Conf is not valid JSON: " + e.message, "error");
        $("conf").focus();
        return;
      }
      if (conf === null || typeof conf !== "object" || Array.isArray(conf)) {
        S.setStatus(out, "Conf must be a JSON object, e.g. {\"key\": 1}", "error");
        $("conf").focus();
        return;
      }
      body.conf = conf;
    }
    const button = event.submitter || event.target.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const run = await S.api("POST", dagPath + "/runs", body);
      S.setStatus(out, "Triggered run " + run.run_id + " (" + run.state + ")", "ok");
      $("run-id").value = "";
      $("logical-date").value = "";
      await refresh();
    } catch (e) {
      S.setStatus(out, e.message, "error");
    } finally {
      button.disabled = false;
    }
  });

  // -- the task-instance panel -----------------------------------------------------------
  function openPanel(runId, taskId, tryNumber, mapped) {
    selected = { runId, taskId, tryNumber, finished: false, mapped: Boolean(mapped), mapIndex: null };
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
      ...(ti.next_retry_at ? fact("Next retry", S.fmtTime(ti.next_retry_at)) : []),
      ...fact("Upstream", ti.upstream.join(", ")), ...fact("Downstream", ti.downstream.join(", ")),
    );
    $("panel-why").hidden = !ti.why;
    $("panel-why").replaceChildren(...(ti.why ? [S.el("strong", { text: "Why: " }), ti.why] : []));
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

  /* A note (or none) as "<label> (who, when): text", as text, never as markup. */
  function showNote(p, label, note) {
    p.hidden = !note;
    p.replaceChildren(...(note ? [S.el("strong", { text: label + " (" + note.who + ", " +
      S.fmtTime(note.at) + "): " }), note.note] : []));
  }

  const SHOWN_INDEXES = 500;

  /* `?map_index=i` (or `&…`) when a mapped task's index is selected, else nothing. */
  function indexQuery(sel, sep) {
    return sel.mapIndex === null || sel.mapIndex === undefined ? "" : sep + "map_index=" + sel.mapIndex;
  }

  /* A mapped task's indexes, one button each (its state); the first is selected at first. */
  async function loadIndexes(want, call) {
    const list = $("panel-indexes");
    const tis = await S.api("GET", runPathOf(want) + "/tasks?task_id=" + encodeURIComponent(want.taskId));
    if (selected !== want || call !== panelCall) return;
    const all = tis.filter((t) => t.map_index !== null);
    if (want.mapIndex === null && all.length) want.mapIndex = all[0].map_index;
    const indexes = all.slice(0, SHOWN_INDEXES);
    $("panel-indexes-title").hidden = list.hidden = false;
    list.replaceChildren(...(indexes.length ? indexes.map((t) => S.el("li", {}, S.el("button", {
      type: "button",
      class: "index state-" + t.state,
      "aria-pressed": t.map_index === want.mapIndex ? "true" : "false",
      dataset: { index: t.map_index, state: t.state },
      text: "[" + t.map_index + "] " + S.stateWords(t.state) + (t.try_number > 1 ? ", try " + t.try_number : ""),
      on: { click: () => { want.mapIndex = t.map_index; want.tryNumber = null; want.finished = false; loadPanel(false); } },
    }))) : [S.el("li", { class: "muted", text: "Not expanded yet (" + tis.map((t) => S.stateWords(t.state)).join(", ") + ")." })]),
      ...(all.length > indexes.length ? [S.el("li", { class: "muted", text: "and " + (all.length - indexes.length) +
        " more (the API lists them all: GET …/tasks?task_id=" + want.taskId + ")" })] : []));
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
