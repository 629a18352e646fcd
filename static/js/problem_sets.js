// Problem-set list: rows whose import or validation is under way follow it live (websocket, polling
// /api/problem-sets as the fallback): lines and bytes read while importing, problems checked while
// validating, then the verdict counts, all without a reload. Each row's badge, line and whether it is
// still under way are the server's (webapp/problems/services.py list_row).
// @api GET /api/problem-sets [].id [].list_row.in_progress [].list_row.badge.text [].list_row.badge.state [].list_row.text
// @api GET /api/problem-sets [].import.in_progress [].import.problems [].import.status [].validation.status
// @reads-elsewhere problem_set (the notification events)
(function () {
  "use strict";
  const rows = new Map();
  document.querySelectorAll("#problem-sets tr[data-problem-set]").forEach((row) => {
    rows.set(Number(row.dataset.problemSet), row);
  });
  const waiting = () => [...rows.values()].some((row) => row.dataset.inProgress === "true");
  if (!waiting()) return;

  // `listRow`: {badge: {state, text}, text, in_progress}; `imp`, `validation`: the import ({status,
  // in_progress, problems, ...}) and the validation ({status, ...}), either null when a message lacks it.
  function show(id, listRow, imp, validation) {
    const row = rows.get(id);
    if (!row || !listRow) return;
    if (imp && !imp.in_progress && imp.problems !== null) {
      row.querySelector("[data-problem-count]").textContent = imp.problems;
    }
    row.dataset.inProgress = listRow.in_progress ? "true" : "false";
    if (imp) row.dataset.import = imp.status;
    if (validation) row.dataset.status = validation.status;
    const badge = row.querySelector("[data-validation-status]");
    badge.textContent = listRow.badge.text;
    badge.className = "status status-" + listRow.badge.state;
    row.querySelector("[data-validation-summary]").textContent = listRow.text;
  }

  try {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + "/ws/notifications/");
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.event === "validation") show(data.problem_set, data.list_row, null, data);
      if (data.event === "import") show(data.problem_set, data.list_row, data, null);
    };
  } catch (err) { /* polling below still follows the jobs */ }

  async function poll() {
    if (!waiting()) return;
    try {
      const response = await fetch("/api/problem-sets",
                                   {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (response.ok) {
        for (const ps of await response.json()) show(ps.id, ps.list_row, ps.import, ps.validation);
      }
    } catch (err) { /* network blip: try again */ }
    if (waiting()) window.setTimeout(poll, 3000);
  }
  window.setTimeout(poll, 3000);
})();
