/* The Gantt chart of one run: a row per task instance (a mapped task's per index), a bar
   per try on one time axis, from when it was queued (hatched) to when it started, then
   to when it ended (coloured by its state), from `GET …/runs/{run_id}/tries`.

   What the database does not keep is not drawn: an earlier try's queue time, and the
   times of an earlier try that printed nothing once a later one started (that try is
   still listed, as "times not kept"). A try still queued or running reaches "now". */
"use strict";

const SluiceGantt = (() => {
  const TICKS = 4;

  const ms = (iso) => (iso ? new Date(iso).getTime() : null);

  /* "12:00:03.250" (UTC): the time of day, to the millisecond. */
  function clock(t) {
    return new Date(t).toISOString().slice(11, 23);
  }

  function seconds(from, to) {
    const s = Math.max(0, (to - from) / 1000);
    return s < 60 ? s.toFixed(s < 10 ? 2 : 1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }

  /* A try's span on the axis: {begin, start, end, open} in ms, or null if no time is kept. */
  function spanOf(t, now) {
    const queued = ms(t.queued_at);
    const started = ms(t.started_at);
    const finished = ms(t.finished_at);
    const begin = queued !== null ? queued : started;
    if (begin === null) return null;
    const open = finished === null && (t.state === "queued" || t.state === "running");
    const end = finished !== null ? finished : open ? now : (started !== null ? started : begin);
    return { begin, start: started, end: Math.max(end, begin), open };
  }

  /* What a try's bar says, in words. */
  function describe(label, t, span) {
    const head = label + ", try " + t.try_number + " (" + (t.state ? Sluice.stateWords(t.state) : "earlier try") + "): ";
    if (!span) return head + "times not kept";
    const what = [];
    what.push("queued " + (t.queued_at ? clock(ms(t.queued_at)) : "(not kept)"));
    what.push("started " + (t.started_at ? clock(ms(t.started_at)) : span.open ? "(not yet)" : "(not kept)"));
    what.push("ended " + (t.finished_at ? clock(ms(t.finished_at)) : span.open ? "(not yet)" : "(not kept)"));
    if (span.start !== null) what.push("ran " + seconds(span.start, span.end) + (span.open ? " so far" : ""));
    if (t.queued_at && span.start !== null) what.push("waited " + seconds(span.begin, span.start));
    if (t.hostname) what.push("on " + t.hostname);
    return head + what.join(", ");
  }

  /* Render `data` (a RunTries) into `container`; `onOpen(taskId, mapIndex)` opens a task
     instance. Returns the number of tries drawn. */
  function render(container, data, onOpen) {
    const now = Date.now();
    const rows = data.task_instances.map((ti) => ({
      ti,
      label: ti.task_id + (ti.map_index !== null ? " [" + ti.map_index + "]" : ""),
      tries: ti.tries.map((t) => ({ t, span: spanOf(t, now) })),
    }));
    let lo = Infinity;
    let hi = -Infinity;
    for (const stamp of [data.queued_at, data.start_date, data.end_date]) {
      const t = ms(stamp);
      if (t !== null) { lo = Math.min(lo, t); hi = Math.max(hi, t); }
    }
    if (data.state === "running" || data.state === "queued") hi = Math.max(hi, now);
    for (const row of rows) {
      for (const { span } of row.tries) if (span) { lo = Math.min(lo, span.begin); hi = Math.max(hi, span.end); }
    }
    if (!Number.isFinite(lo)) { lo = now; hi = now; }
    if (hi - lo < 1000) hi = lo + 1000;
    const pct = (t) => ((t - lo) / (hi - lo)) * 100 + "%";

    const axis = Sluice.el("div", { class: "gantt-axis", "aria-hidden": "true" });
    for (let i = 0; i <= TICKS; i++) {
      const tick = Sluice.el("span", { class: "gantt-tick", text: i === 0 ? clock(lo) : "+" + seconds(lo, lo + ((hi - lo) * i) / TICKS) });
      tick.style.left = (100 * i) / TICKS + "%";
      if (i === TICKS) tick.classList.add("last");
      axis.append(tick);
    }
    const head = Sluice.el("tr", {}, [
      Sluice.el("th", { scope: "col", text: "Task instance" }),
      Sluice.el("th", { scope: "col", class: "gantt-axis-cell" }, [
        Sluice.el("span", { class: "visually-hidden", text: "Tries from " + clock(lo) + " to " + clock(hi) + " (UTC)" }),
        axis,
      ]),
    ]);
    let drawn = 0;
    const body = rows.map(({ ti, label, tries }) => {
      const track = Sluice.el("div", { class: "gantt-track" });
      const said = [];
      for (const { t, span } of tries) {
        const words = describe(label, t, span);
        said.push(words);
        const bar = Sluice.el("span", {
          class: "gantt-try" + (span ? "" : " untimed"),
          title: words,
          dataset: { try: t.try_number, state: t.state || "earlier" },
        });
        if (span) {
          bar.style.left = pct(span.begin);
          bar.style.width = ((span.end - span.begin) / (hi - lo)) * 100 + "%";
          const whole = span.end - span.begin;
          const waited = span.start === null ? whole : span.start - span.begin;
          if (waited > 0) {
            const queued = Sluice.el("span", { class: "gantt-queued" });
            queued.style.flexBasis = whole ? (100 * waited) / whole + "%" : "100%";
            bar.append(queued);
          }
          if (span.start !== null) {
            bar.append(Sluice.el("span", { class: "gantt-run state-" + (t.state || "earlier") }));
          }
          drawn++;
        } else {
          bar.textContent = "try " + t.try_number + ": times not kept";
        }
        track.append(bar);
      }
      return Sluice.el("tr", { dataset: { task: ti.task_id, index: ti.map_index === null ? "" : ti.map_index, state: ti.state } }, [
        Sluice.el("th", { scope: "row" }, [
          Sluice.el("button", {
            type: "button",
            class: "gantt-task",
            title: "Open " + label,
            text: label,
            on: { click: () => onOpen(ti.task_id, ti.map_index) },
          }),
          " ",
          Sluice.chip(ti.state, label),
        ]),
        Sluice.el("td", {}, [
          Sluice.el("span", { class: "visually-hidden", text: said.length ? said.join("; ") : label + ": no try (" + Sluice.stateWords(ti.state) + ")" }),
          track,
        ]),
      ]);
    });
    const table = Sluice.el("table", { class: "gantt" }, [
      Sluice.el("caption", { class: "visually-hidden", text: "Each try of run " + data.run_id + ": queued, then running, on one time axis" }),
      Sluice.el("thead", {}, head),
      Sluice.el("tbody", {}, body),
    ]);
    container.replaceChildren(table);
    return drawn;
  }

  return { render };
})();
