/* `/`: the DAGs, their schedule, paused switch and recent runs; refreshed every few seconds. */
"use strict";

(() => {
  const S = Sluice;
  const REFRESH_MS = 5000;
  const status = document.getElementById("status");
  const tbody = document.querySelector("#dags tbody");
  let timer = null;

  function report(text, kind) { S.setStatus(status, text, kind); }

  function row(dag) {
    const href = "/dags/" + encodeURIComponent(dag.dag_id);
    const runs = S.el("ul", { class: "runs", "aria-label": "recent runs of " + dag.dag_id },
      dag.recent_runs.map((run) => S.el("li", {}, S.chip(run.state, "run " + run.run_id))));
    if (!dag.recent_runs.length) runs.append(S.el("li", { class: "muted", text: "no runs" }));
    return S.el("tr", { dataset: { dag: dag.dag_id } }, [
      S.el("th", { scope: "row" }, [
        S.el("a", { class: "dag-link", href, text: dag.dag_id }),
        dag.import_error ? S.el("div", { class: "error-text small", text: "last parse failed: " + dag.import_error }) : null,
        dag.watch_error ? S.el("div", { class: "error-text small", text: "watch failed: " + dag.watch_error }) : null,
      ]),
      S.el("td", { class: "mono", text: dag.schedule || "manual only" }),
      S.el("td", {}, S.pauseSwitch(dag.dag_id, dag.is_paused, report)),
      S.el("td", { class: "next-run", text: S.fmtNextRun(dag) }),
      S.el("td", {}, runs),
    ]);
  }

  function render(data) {
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.dag : null;
    tbody.replaceChildren(...data.dags.map(row));
    document.getElementById("empty").hidden = data.dags.length > 0;
    const errors = document.getElementById("import-errors");
    errors.hidden = data.import_errors.length === 0;
    errors.querySelector("ul").replaceChildren(...data.import_errors.map((e) =>
      S.el("li", {}, [S.el("code", { text: e.fileloc }), S.el("pre", { text: e.error })])));
    if (focused) {
      const again = tbody.querySelector('button[role="switch"][data-dag="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  let calls = 0; /* only the newest call renders and sets the timer */
  async function load() {
    clearTimeout(timer);
    const call = ++calls;
    try {
      const data = await S.api("GET", "/dags");
      if (call !== calls) return;
      render(data);
      if (status.classList.contains("error")) report("");
    } catch (e) {
      if (call !== calls) return;
      report(e.message, "error");
    }
    timer = setTimeout(load, REFRESH_MS);
  }

  S.initTokenForm(load);
  load();
})();
