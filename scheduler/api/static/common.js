/* Shared by the pages: calling /api/v1 as the user logged in (the session cookie, and
   its CSRF token on writes) or with the saved token, building DOM nodes (always with
   textContent, never HTML from data), state labels and times. */
"use strict";

const Sluice = (() => {
  const TOKEN_KEY = "sluice.apiToken";

  /* [abbreviation shown in a cell, words read out and shown in the legend] */
  const STATES = {
    none: ["–", "no status"],
    scheduled: ["sched", "scheduled"],
    queued: ["queue", "queued"],
    running: ["run", "running"],
    success: ["ok", "success"],
    failed: ["fail", "failed"],
    up_for_retry: ["retry", "up for retry"],
    up_for_reschedule: ["resched", "up for reschedule"],
    deferred: ["defer", "deferred"],
    upstream_failed: ["upfail", "upstream failed"],
    skipped: ["skip", "skipped"],
    removed: ["rem", "removed"],
  };
  const TERMINAL = new Set(["success", "failed", "upstream_failed", "skipped", "removed"]);

  function token() {
    try { return window.localStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }

  function setToken(value) {
    try {
      if (value) window.localStorage.setItem(TOKEN_KEY, value);
      else window.localStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: the token lasts for this page only */ }
  }

  /* The login, if any: {user, role, csrf_token} of GET /session, asked once a page. */
  let session = null;
  let sessionAsked = null;
  const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);

  let loggingOut = false;

  function loadSession() {
    if (!sessionAsked) {
      sessionAsked = (async () => {
        try {
          const response = await fetch("/api/v1/session", {
            headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store",
          });
          session = response.ok ? await response.json() : null;
        } catch (e) {
          session = null;
        }
        return session;
      })();
    }
    return sessionAsked;
  }

  /* Whether the buttons that write (trigger, clear, mark, cancel, notes, events, pause) are
     shown: not to a viewer. With a saved token and no login, as before: shown. */
  function canOperate() { return !session || session.role !== "viewer"; }

  function loginHref() {
    return "/login?next=" + encodeURIComponent(window.location.pathname + window.location.search);
  }

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    await loadSession();
    const headers = { Accept: "application/json" };
    const saved = token();
    if (session) {
      if (!SAFE.has(method)) headers["X-CSRF-Token"] = session.csrf_token;
    } else if (saved) {
      headers.Authorization = "Bearer " + saved;
    }
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch("/api/v1" + path, init);
    } catch (e) {
      throw new ApiError(0, "the API server cannot be reached");
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      let detail = data && typeof data.detail === "string" ? data.detail : response.statusText;
      if (response.status === 401 && method === "GET" && !saved && !loggingOut) {
        window.location.assign(loginHref()); /* reads need a login here */
      }
      if (response.status === 401) detail += " (log in, or enter an API token at the top of the page)";
      throw new ApiError(response.status, detail || "request failed (" + response.status + ")");
    }
    return data;
  }

  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of [].concat(children || [])) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function stateWords(state) { return (STATES[state] || [state, state])[1]; }
  function stateAbbr(state) { return (STATES[state] || [state, state])[0]; }

  /* A coloured chip that also says its state in text. */
  function chip(state, describe) {
    return el("span", {
      class: "chip state-" + state,
      title: (describe ? describe + ": " : "") + stateWords(state),
      "aria-label": (describe ? describe + ": " : "") + stateWords(state),
      dataset: { state },
      text: stateAbbr(state),
    });
  }

  function legend(list) {
    list.replaceChildren(...Object.keys(STATES).map((state) =>
      el("li", {}, [el("span", { class: "chip state-" + state, "aria-hidden": "true", text: stateAbbr(state) }), stateWords(state)])));
  }

  function fmtTime(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  // The next scheduled run: when it is created (its interval's end), its logical date beside.
  function fmtNextRun(dag) {
    if (!dag.next_dagrun_create_after) return "—";
    return fmtTime(dag.next_dagrun_create_after) + " (logical date " + fmtTime(dag.next_dagrun) + ")";
  }

  function fmtDuration(startIso, endIso) {
    if (!startIso) return "—";
    const end = endIso ? new Date(endIso) : new Date();
    let secs = Math.max(0, (end - new Date(startIso)) / 1000);
    if (secs < 60) return secs.toFixed(secs < 10 ? 2 : 1) + " s" + (endIso ? "" : " so far");
    const mins = Math.floor(secs / 60);
    secs = Math.round(secs % 60);
    return mins + " min " + secs + " s" + (endIso ? "" : " so far");
  }

  function setStatus(node, text, kind) {
    node.textContent = text || "";
    node.classList.toggle("error", kind === "error");
    node.classList.toggle("ok", kind === "ok");
  }

  /* The paused switch of one DAG; calls PATCH and reports through `report`. */
  function pauseSwitch(dagId, isPaused, report, onChange) {
    const label = el("span", { class: "switch-text" });
    const button = el("button", { type: "button", role: "switch", class: "switch", dataset: { dag: dagId } },
      [el("span", { class: "track", "aria-hidden": "true" }), label]);
    function show(paused) {
      button.setAttribute("aria-checked", paused ? "true" : "false");
      button.setAttribute("aria-label", "Paused: " + dagId);
      label.textContent = paused ? "paused" : "active";
    }
    show(isPaused);
    if (!canOperate()) {
      button.disabled = true;
      button.title = "a viewer cannot pause or unpause a DAG";
      return button;
    }
    button.addEventListener("click", async () => {
      const next = button.getAttribute("aria-checked") !== "true";
      button.disabled = true;
      try {
        const dag = await api("PATCH", "/dags/" + encodeURIComponent(dagId), { is_paused: next });
        show(dag.is_paused);
        report(dagId + (dag.is_paused ? " paused" : " unpaused"), "ok");
        if (onChange) onChange(dag);
      } catch (e) {
        report(e.message, "error");
      } finally {
        button.disabled = false;
      }
    });
    return button;
  }

  /* Who is logged in and a logout button, or a link to log in; with a login, the token
     form is hidden and the page marks the role (style.css hides what a viewer cannot use). */
  async function showAccount(form) {
    await loadSession();
    const header = form.parentElement;
    const box = el("div", { class: "account", id: "account" });
    if (session) {
      form.hidden = true;
      document.body.dataset.role = session.role;
      const out = el("button", { type: "button", id: "logout", text: "Log out" });
      out.addEventListener("click", async () => {
        out.disabled = true;
        loggingOut = true; /* a refresh's 401 from here on must not send it to /login?next= */
        try { await api("DELETE", "/session"); } catch (e) { /* ended already */ }
        window.location.assign("/login");
      });
      box.append(el("span", { id: "who", text: session.user + " (" + session.role + ")" }), out);
    } else {
      box.append(el("a", { href: loginHref(), id: "login-link", text: "Log in" }));
    }
    header.append(box);
  }

  function initTokenForm(onSaved) {
    const form = document.getElementById("token-form");
    const input = document.getElementById("token");
    const stateNode = document.getElementById("token-state");
    const show = () => { stateNode.textContent = token() ? "token saved" : "no token: read only"; };
    input.value = token();
    show();
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setToken(input.value.trim());
      show();
      if (onSaved) onSaved();
    });
    showAccount(form);
  }

  return { api, ApiError, el, chip, legend, stateWords, stateAbbr, fmtTime, fmtNextRun, fmtDuration, setStatus,
           pauseSwitch, initTokenForm, loadSession, canOperate, TERMINAL };
})();
