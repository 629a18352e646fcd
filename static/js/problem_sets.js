// Problem-set list: rows whose import or validation is under way follow it live (websocket, polling
// /api/problem-sets as the fallback): lines and bytes read while importing, problems checked while
// validating, then the verdict counts, all without a reload.
(function () {
  "use strict";
  const rows = new Map();
  document.querySelectorAll("#problem-sets tr[data-problem-set]").forEach((row) => {
    rows.set(Number(row.dataset.problemSet), row);
  });
  const active = (row) => row.dataset.import === "importing" ||
    (row.dataset.import === "done" && (row.dataset.status === "pending" || row.dataset.status === "running"));
  const waiting = () => [...rows.values()].some(active);
  if (!waiting()) return;

  function size(bytes) {
    if (bytes >= 1 << 20) return (bytes / (1 << 20)).toFixed(1) + " MB";
    if (bytes >= 1 << 10) return (bytes / (1 << 10)).toFixed(1) + " KB";
    return bytes + " bytes";
  }

  function summarize(row, v, imp) {
    if (row.dataset.import === "importing") {
      return "importing: " + imp.lines + " lines, " + size(imp.read_bytes) + " of " + size(imp.total_bytes) + " read";
    }
    if (row.dataset.import === "failed") return "import failed";
    if (row.dataset.status === "done") return v.passed + " ok, " + v.failed + " failing";
    if (row.dataset.status === "running") return v.checked + " of " + v.total + " checked";
    return "";
  }

  // `v`: the validation ({status, passed, failed, checked, total}); `imp`: the import ({status,
  // lines, read_bytes, total_bytes, problems}); either may be null (a notification carries one).
  function show(id, v, imp) {
    const row = rows.get(id);
    if (!row) return;
    if (imp) {
      if (imp.status !== "importing" && row.dataset.import === "importing" && imp.problems !== null) {
        row.querySelector("[data-problem-count]").textContent = imp.problems;
      }
      row.dataset.import = imp.status;
      row.importState = imp;
    }
    if (v) {
      row.dataset.status = v.status;
      row.validationState = v;
      const badge = row.querySelector("[data-validation-status]");
      // As ProblemSet.validation_badge: failing problems make a finished validation a warning.
      const warn = v.status === "done" && v.failed > 0;
      badge.textContent = warn ? v.failed + " failing" : v.status;
      badge.className = "status status-" + (warn ? "warning" : v.status);
    }
    row.querySelector("[data-validation-summary]").textContent =
      summarize(row, row.validationState || {}, row.importState || {});
  }

  try {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + "/ws/notifications/");
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.event === "validation") show(data.problem_set, data, null);
      if (data.event === "import") show(data.problem_set, null, data);
    };
  } catch (err) { /* polling below still follows the jobs */ }

  async function poll() {
    if (!waiting()) return;
    try {
      const response = await fetch("/api/problem-sets",
                                   {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (response.ok) {
        for (const ps of await response.json()) show(ps.id, ps.validation, ps.import);
      }
    } catch (err) { /* network blip: try again */ }
    if (waiting()) window.setTimeout(poll, 3000);
  }
  window.setTimeout(poll, 3000);
})();
