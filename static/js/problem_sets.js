// Problem-set list: rows whose validation is pending or running follow it live (websocket, polling
// /api/problem-sets as the fallback) and show the final verdict counts without a reload.
(function () {
  "use strict";
  const rows = new Map();
  document.querySelectorAll("#problem-sets tr[data-problem-set]").forEach((row) => {
    rows.set(Number(row.dataset.problemSet), row);
  });
  const active = (s) => s === "pending" || s === "running";
  const waiting = () => [...rows.values()].some((row) => active(row.dataset.status));
  if (!waiting()) return;

  function show(id, status, passed, failed) {
    const row = rows.get(id);
    if (!row || !status) return;
    row.dataset.status = status;
    const badge = row.querySelector("[data-validation-status]");
    badge.textContent = status;
    badge.className = "status status-" + status;
    row.querySelector("[data-validation-summary]").textContent =
      status === "done" ? passed + " ok, " + failed + " failing" : "";
  }

  try {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + "/ws/notifications/");
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.event === "validation") show(data.problem_set, data.status, data.passed, data.failed);
    };
  } catch (err) { /* polling below still follows the jobs */ }

  async function poll() {
    if (!waiting()) return;
    try {
      const response = await fetch("/api/problem-sets",
                                   {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (response.ok) {
        for (const ps of await response.json()) {
          show(ps.id, ps.validation.status, ps.validation.passed, ps.validation.failed);
        }
      }
    } catch (err) { /* network blip: try again */ }
    if (waiting()) window.setTimeout(poll, 3000);
  }
  window.setTimeout(poll, 3000);
})();
