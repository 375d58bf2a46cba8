/* `/login`: a user name with a password or an API token makes a session (an HttpOnly
   cookie the page never sees); then back to the page that sent the user here. */
"use strict";

(() => {
  const form = document.getElementById("login-form");
  const user = document.getElementById("login-user");
  const secret = document.getElementById("login-secret");
  const label = document.getElementById("login-secret-label");
  const result = document.getElementById("login-result");

  function kind() { return document.getElementById("kind-token").checked ? "token" : "password"; }

  /* Only a path of this site: never another origin (`//host`, `/\host`, `https:`). */
  function nextPage() {
    const next = new URLSearchParams(window.location.search).get("next") || "/";
    return /^\/(?![\/\\])/.test(next) && !next.startsWith("/login") ? next : "/";
  }

  function say(text, isError) {
    result.textContent = text;
    result.classList.toggle("error", Boolean(isError));
  }

  for (const radio of form.querySelectorAll('input[name="kind"]')) {
    radio.addEventListener("change", () => {
      label.textContent = kind() === "token" ? "API token" : "Password";
      secret.autocomplete = kind() === "token" ? "off" : "current-password";
    });
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!user.value.trim() || !secret.value) {
      say("Enter the user name and the " + (kind() === "token" ? "token" : "password") + ".", true);
      return;
    }
    const body = { user: user.value.trim(), [kind()]: kind() === "token" ? secret.value.trim() : secret.value };
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    say("Logging in…");
    try {
      const response = await fetch("/api/v1/session", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify(body),
      });
      let data = null;
      try { data = await response.json(); } catch (e) { data = null; }
      if (!response.ok) {
        say(data && typeof data.detail === "string" ? data.detail : "login failed (" + response.status + ")", true);
        return;
      }
      say("Logged in as " + data.user + " (" + data.role + ").");
      window.location.assign(nextPage());
    } catch (e) {
      say("the API server cannot be reached", true);
    } finally {
      button.disabled = false;
    }
  });
})();
