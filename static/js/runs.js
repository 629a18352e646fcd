// Runs list: pick runs to compare, and follow active runs' status without a reload.
document.getElementById("compare-form").addEventListener("submit", function (e) {
  var ids = Array.from(document.querySelectorAll(".compare-pick:checked")).map(function (c) { return c.value; });
  if (ids.length < 2) { e.preventDefault(); alert("Pick at least two runs to compare."); return; }
  document.getElementById("compare-ids").value = ids.join(",");
});
// Follow active runs' status and progress without a reload (polls only while one is active).
(function poll() {
  var active = ["queued", "running", "cancelling"];
  var live = Array.from(document.querySelectorAll("tr[data-run] [data-cell=status]")).some(function (el) {
    return active.indexOf(el.textContent) >= 0;
  });
  if (!live) return;
  setTimeout(function () {
    fetch("/api/runs", {credentials: "same-origin"}).then(function (r) { return r.ok ? r.json() : []; }).then(function (runs) {
      runs.forEach(function (run) {
        var row = document.querySelector('tr[data-run="' + run.id + '"]');
        if (!row) return;
        var badge = row.querySelector("[data-cell=status]");
        badge.textContent = run.status; badge.className = "status status-" + run.status;
        row.querySelector("[data-cell=progress]").textContent = run.step + " / " + run.steps + " steps";
      });
    }).catch(function () {}).then(poll);
  }, 4000);
})();
