// The console's behaviour: follow /console/events, render with textContent only (what the
// agent wrote is hostile text), and POST each click with the session's CSRF token.
"use strict";

(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const waitingBox = document.getElementById("waiting");
  const template = document.getElementById("question");
  const cards = new Map(); // question id -> card element
  let clockOffset = 0; // server time minus browser time, in seconds

  function text(element, selector, value) {
    element.querySelector(selector).textContent = value == null ? "" : String(value);
  }

  function remaining(deadline) {
    return Math.max(0, Math.round(deadline - (Date.now() / 1000 + clockOffset)));
  }

  function tick() {
    for (const card of cards.values()) {
      const left = remaining(Number(card.dataset.deadline));
      const countdown = card.querySelector(".countdown");
      countdown.textContent = left + " s left";
      countdown.classList.toggle("urgent", left <= 10);
    }
  }

  async function decide(card, verdict) {
    const outcome = card.querySelector(".outcome");
    for (const button of card.querySelectorAll("button")) button.disabled = true;
    try {
      const response = await fetch("/console/decisions/" + encodeURIComponent(card.dataset.question), {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ verdict: verdict, reason: card.querySelector(".reason").value }),
      });
      const body = await response.json().catch(() => ({}));
      outcome.textContent = response.ok ? verdict + " sent" : (body.message || "refused: HTTP " + response.status);
      if (!response.ok) for (const button of card.querySelectorAll("button")) button.disabled = false;
    } catch (error) {
      outcome.textContent = "the bridge could not be reached";
      for (const button of card.querySelectorAll("button")) button.disabled = false;
    }
  }

  function card(question) {
    const element = template.content.firstElementChild.cloneNode(true);
    element.dataset.question = question.id;
    element.dataset.deadline = String(question.deadline);
    text(element, ".kind", question.kind);
    text(element, ".title", question.title);
    text(element, ".task", question.task_id);
    text(element, ".context", question.context_id);
    text(element, ".principal", question.principal);
    text(element, ".rule", question.rule + (question.reason ? ": " + question.reason : ""));
    text(element, ".command", question.command);
    text(element, ".diff", question.diff || (question.locations || []).join("\n"));
    element.querySelector(".allow").addEventListener("click", () => decide(element, "allow"));
    element.querySelector(".deny").addEventListener("click", () => decide(element, "deny"));
    return element;
  }

  function renderWaiting(waiting) {
    const ids = new Set(waiting.map((q) => q.id));
    for (const [id, element] of cards) {
      if (!ids.has(id)) {
        element.remove();
        cards.delete(id);
      }
    }
    for (const question of waiting) {
      if (!cards.has(question.id)) {
        const element = card(question);
        cards.set(question.id, element);
        waitingBox.appendChild(element);
      }
    }
    document.getElementById("waiting-count").textContent = "(" + waiting.length + ")";
    document.getElementById("nothing-waiting").hidden = waiting.length > 0;
    tick();
  }

  function renderRecent(recent) {
    const body = document.querySelector("#recent tbody");
    const rows = recent.map((entry) => {
      const row = document.createElement("tr");
      row.dataset.question = entry.id;
      const cells = [
        new Date(entry.ended_at * 1000).toLocaleTimeString(),
        entry.verdict,
        entry.how,
        entry.kind,
        entry.command || entry.title,
        entry.task_id,
        entry.answer_reason,
      ];
      cells.forEach((value, index) => {
        const cell = document.createElement("td");
        cell.textContent = value == null ? "" : String(value);
        if (index === 1) cell.className = value === "allow" ? "allow" : "deny";
        row.appendChild(cell);
      });
      return row;
    });
    body.replaceChildren(...rows);
  }

  function connect() {
    const connection = document.getElementById("connection");
    const events = new EventSource("/console/events");
    events.addEventListener("state", (event) => {
      const state = JSON.parse(event.data);
      clockOffset = state.now - Date.now() / 1000;
      connection.textContent = "live";
      connection.className = "connection live";
      renderWaiting(state.waiting);
      renderRecent(state.recent);
    });
    events.addEventListener("error", () => {
      connection.textContent = events.readyState === EventSource.CLOSED ? "disconnected: reload to log in again" : "reconnecting…";
      connection.className = "connection lost";
    });
  }

  setInterval(tick, 1000);
  connect();
})();
