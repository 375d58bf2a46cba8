/* `/dags/{dag_id}/versions/{sha}`: one version of a git bundle's DAG: its commit, the
   tasks it adds and removes against another version (by default the one before it), its
   DAG file's code, and the DAG's other versions. Everything shown comes from /api/v1 and
   is set as text, never as markup. */
"use strict";

(() => {
  const S = Sluice;
  const parts = window.location.pathname.split("/"); /* "", "dags", dag, "versions", sha */
  const dagId = decodeURIComponent(parts[2] || "");
  const sha = decodeURIComponent(parts[4] || "");
  const dagPath = "/dags/" + encodeURIComponent(dagId);
  const versionPath = dagPath + "/versions/" + encodeURIComponent(sha);
  const $ = (id) => document.getElementById(id);
  const status = $("status");
  let shown = null; /* the version's full sha, once its code is read */

  function report(text, kind) { S.setStatus(status, text, kind); }

  function versionHref(full) { return dagPath + "/versions/" + encodeURIComponent(full); }

  $("crumb-dag").textContent = dagId;
  $("crumb-dag").href = dagPath;
  $("crumb").textContent = "version " + sha.slice(0, 12);
  $("title").textContent = dagId + " @ " + sha.slice(0, 12);

  async function loadCode() {
    try {
      const code = await S.api("GET", versionPath + "/code");
      shown = code.sha;
      document.title = code.dag_id + " @ " + code.short + " · Sluice";
      $("title").textContent = code.dag_id + " @ " + code.short;
      $("crumb").textContent = "version " + code.short;
      $("version-meta").textContent = [
        code.subject, code.author, S.fmtTime(code.committed_at), "commit " + code.sha,
      ].join(" · ");
      $("code-meta").textContent = code.path + (code.truncated ? " (its first MiB only)" : "");
      $("code").textContent = code.content;
    } catch (e) {
      $("code").textContent = "";
      report(e.message, "error");
    }
  }

  function taskItems(ids, none) {
    return ids.length ? ids.map((id) => S.el("li", { class: "mono", text: id }))
      : [S.el("li", { class: "muted", text: none })];
  }

  async function loadChanges(since) {
    const note = $("changes-note");
    try {
      const changes = await S.api("GET", versionPath + "/changes" + (since ? "?since=" + encodeURIComponent(since) : ""));
      $("added").replaceChildren(...taskItems(changes.added, "none"));
      $("removed").replaceChildren(...taskItems(changes.removed, "none"));
      $("since").value = since ? changes.since : "";
      S.setStatus(note, changes.since ? "Against the version at " + changes.since.slice(0, 12) + "."
        : "The DAG's first version: every task is new.");
    } catch (e) {
      S.setStatus(note, e.message, "error");
    }
  }

  async function loadVersions() {
    let data;
    try {
      data = await S.api("GET", dagPath + "/versions");
    } catch (e) {
      report(e.message, "error");
      return;
    }
    const select = $("since");
    const current = select.value;
    select.replaceChildren(S.el("option", { value: "", text: "before this one" }),
      ...data.versions.map((v) => S.el("option", { value: v.sha, text: v.short + " · " + v.subject })));
    if (current) select.value = current;
    document.querySelector("#versions tbody").replaceChildren(...data.versions.map((v) => {
      const here = v.sha === shown || v.sha.startsWith(sha);
      return S.el("tr", { dataset: { sha: v.sha } }, [
        S.el("th", { scope: "row" }, S.el("a", { class: "mono", href: versionHref(v.sha), text: v.short,
                                                 "aria-current": here ? "page" : null })),
        S.el("td", { text: S.fmtTime(v.committed_at) }),
        S.el("td", { text: v.author }),
        S.el("td", { text: String(v.runs) }),
        S.el("td", { text: v.subject }),
      ]);
    }));
  }

  $("since").addEventListener("change", () => loadChanges($("since").value || null));

  S.initTokenForm(() => { loadCode(); loadVersions().then(() => loadChanges($("since").value || null)); });
  loadCode();
  loadVersions().then(() => loadChanges(null));
})();
