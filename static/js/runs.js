// Runs list: pick runs to compare, and follow active runs' status without a reload.
// The button says how many runs are picked and stays off below two, so it never goes nowhere.
// @api GET /api/runs [].id [].status [].step [].steps
(function () {
  var form = document.getElementById("compare-form"), button = document.getElementById("compare-button");
  function picked() {
    return Array.from(document.querySelectorAll(".compare-pick:checked")).map(function (c) { return c.value; });
  }
  function sync() {
    if (!button) return;
    var n = picked().length;
    button.disabled = n < 2;
    button.textContent = n < 2 ? "Compare: tick " + (2 - n) + " more run" + (n === 1 ? "" : "s")
      : "Compare " + n + " runs";
  }
  form.addEventListener("change", sync);
  form.addEventListener("submit", function (e) {
    var ids = picked();
    if (ids.length < 2) { e.preventDefault(); sync(); return; }
    document.getElementById("compare-ids").value = ids.join(",");
  });
  sync();
})();
// Follow active runs' status and progress without a reload (polls only while one is active; which
// statuses are active is the Run model's, webapp/runs/models.py status_groups).
(function poll() {
  var active = JSON.parse(document.getElementById("run-statuses").textContent).active;
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

// Sort by any column (click its header again to reverse) and search by name, notes, set or status.
(function () {
  var table = document.getElementById("runs-table");
  var body = table.tBodies[0];
  var rows = function () { return Array.from(body.querySelectorAll("tr[data-run]")); };
  table.querySelectorAll("th[data-sort]").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = Array.from(th.parentNode.children).indexOf(th);
      var dir = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
      table.querySelectorAll("th[aria-sort]").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir);
      var numeric = th.dataset.type === "number", sign = dir === "ascending" ? 1 : -1;
      var key = function (tr) {
        var v = tr.children[col].dataset.value;
        return numeric ? (v === "" || v === undefined ? null : Number(v)) : (v || "");
      };
      rows().sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);  // runs without a value last
        return sign * (x < y ? -1 : x > y ? 1 : 0);
      }).forEach(function (tr) { body.appendChild(tr); });
    });
  });
  var search = document.getElementById("run-search");
  search.addEventListener("input", function () {
    var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    rows().forEach(function (tr) {
      var hit = words.every(function (w) { return tr.dataset.search.indexOf(w) >= 0; });
      tr.hidden = !hit; shown += hit;
    });
    document.getElementById("run-count").textContent = shown + " of " + rows().length + " runs";
  });
})();
