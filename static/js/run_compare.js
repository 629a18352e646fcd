// Compare runs: the same metric of every run on one chart; a picker for any metric any run reported;
// x by step, wall time or generated tokens, each run on its own clock and token count.
(function () {
  "use strict";
  var series = JSON.parse(document.getElementById("compare-data").textContent);
  // The legend sits under the x-axis title (not on top of it).
  var LAYOUT = {margin: {l: 56, r: 12, t: 34, b: 78}, font: {size: 11},
                legend: {orientation: "h", x: 0, y: -0.3, yanchor: "top"},
                xaxis: {title: {text: "step", standoff: 4}, rangemode: "tozero"}, yaxis: {automargin: true}};
  var PERCENT = /pass|clip fraction|truncated/;

  // Smoothing, log y and the x axis as on the run page (the same choices, kept in this browser).
  var controls = {smoothing: 0, logY: false, x: "step"};
  try { Object.assign(controls, JSON.parse(localStorage.getItem("crucible.charts") || "{}")); } catch (e) { /* defaults */ }
  var smoothingInput = document.getElementById("chart-smoothing"), logInput = document.getElementById("chart-log-y");
  var xInput = document.getElementById("chart-x");
  smoothingInput.value = controls.smoothing; logInput.checked = controls.logY; xInput.value = controls.x;
  if (!xInput.value) xInput.value = controls.x = "step";  // an unknown saved choice
  var xOf = new Map();  // run id -> (step -> x on the chosen axis)
  function scaleRuns() {
    series.forEach(function (run) { xOf.set(run.id, CrucibleCharts.xScale(run.metrics, controls.x)); });
  }

  function traces(key) {
    var out = [];
    series.forEach(function (run) {
      var x = xOf.get(run.id);
      var pts = run.metrics.filter(function (m) {
        return typeof m.metrics[key] === "number" && !(controls.logY && m.metrics[key] <= 0) && x(m.step) !== null;
      });
      var xs = pts.map(function (m) { return x(m.step); }), ys = pts.map(function (m) { return m.metrics[key]; });
      var colour = CrucibleCharts.runColour(run.id), smooth = controls.smoothing > 0 && xs.length > 1;
      if (smooth) {
        out.push({x: xs, y: ys, name: "#" + run.id + " (raw)", meta: "raw", mode: "lines", type: "scatter",
                  showlegend: false, hoverinfo: "skip", opacity: 0.25, line: {color: colour, width: 1}});
      }
      out.push({x: xs, y: CrucibleCharts.ema(ys, controls.smoothing), rawY: ys, name: "#" + run.id + " " + run.name,
                mode: "lines", type: "scatter", line: {color: colour},
                hovertemplate: "%{y:.4g}" + (smooth ? " (smoothed)" : "") + "<extra>#" + run.id + "</extra>"});
    });
    return out;
  }
  var maxStep = Math.max.apply(null, [1].concat(series.map(function (run) {
    return run.metrics.length ? run.metrics[run.metrics.length - 1].step : 0;
  })));
  function plot(id, title, data) {
    var xTitle = CrucibleCharts.xTitle(controls.x);
    var layout = Object.assign({}, LAYOUT, {title: CrucibleCharts.title(title), hovermode: "x unified",
                                            xaxis: Object.assign({}, LAYOUT.xaxis, {title: {text: xTitle, standoff: 4}},
                                                                 CrucibleCharts.xAxis(controls.x, maxStep))});
    if (PERCENT.test(title)) layout.yaxis = {automargin: true, tickformat: ".0%"};
    if (controls.logY) layout.yaxis = Object.assign({}, layout.yaxis, {type: "log"});
    if (!data.some(function (t) { return t.x.length; })) {
      layout = {title: layout.title, xaxis: {visible: false}, yaxis: {visible: false},
                annotations: [{text: "no run reported " + title, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
                               font: {size: 12, color: "#6b7280"}}]};
    }
    Plotly.react(document.getElementById(id), data, layout,
                 CrucibleCharts.config("compare-" + id.replace(/^compare-/, ""), function () { return xTitle; }));
  }

  var keys = new Set();
  series.forEach(function (run) { run.metrics.forEach(function (m) { Object.keys(m.metrics).forEach(function (k) { keys.add(k); }); }); });
  var pick = document.getElementById("metric-pick");
  // Listed by what they mean (as the run page names them); the key is the option's tooltip.
  Array.from(keys).sort(function (a, b) {
    return CrucibleMetrics.label(a).localeCompare(CrucibleMetrics.label(b));
  }).forEach(function (k) {
    var o = document.createElement("option");
    o.value = k; o.textContent = CrucibleMetrics.label(k); o.title = k;
    pick.appendChild(o);
  });
  if (keys.has("reward/pass_rate")) pick.value = "reward/pass_rate";
  function plotPicked() { plot("compare-main", CrucibleMetrics.label(pick.value), traces(pick.value)); }
  pick.addEventListener("change", plotPicked);
  function drawAll() {
    scaleRuns();
    if (pick.value) plotPicked();
    plot("compare-reward", CrucibleMetrics.label("reward/mean"), traces("reward/mean"));
    plot("compare-kl", CrucibleMetrics.label("kl"), traces("kl"));
    plot("compare-eval", "held-out pass@1", series.map(function (run) {
      var x = xOf.get(run.id);
      var pts = run.evals.filter(function (e) {
        return e.split === "heldout" && e["pass@1"] !== null && x(e.step) !== null;
      });
      return {x: pts.map(function (e) { return x(e.step); }), y: pts.map(function (e) { return e["pass@1"]; }),
              name: "#" + run.id + " " + run.name, mode: "lines+markers", type: "scatter",
              line: {color: CrucibleCharts.runColour(run.id)}, hovertemplate: "%{y:.0%}<extra>#" + run.id + "</extra>"};
    }));
  }
  [smoothingInput, logInput, xInput].forEach(function (el) {
    el.addEventListener("input", function () {
      controls.smoothing = Number(smoothingInput.value); controls.logY = logInput.checked; controls.x = xInput.value;
      document.getElementById("chart-smoothing-value").textContent = controls.smoothing.toFixed(2);
      var saved = {};
      try { saved = JSON.parse(localStorage.getItem("crucible.charts") || "{}"); } catch (e) { /* none */ }
      try { localStorage.setItem("crucible.charts", JSON.stringify(Object.assign(saved, controls))); } catch (e) { /* private mode */ }
      drawAll();
    });
  });
  document.getElementById("chart-smoothing-value").textContent = Number(controls.smoothing).toFixed(2);
  drawAll();
})();
// The summary table sorts by a clicked column (again: the other way); runs without a value stay last.
(function () {
  "use strict";
  var table = document.getElementById("compare-summary");
  if (!table) return;
  var heads = Array.from(table.querySelectorAll("th[data-sort]"));
  heads.forEach(function (th, column) {
    th.tabIndex = 0;
    function sort() {
      var descending = th.getAttribute("aria-sort") === "ascending";
      heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      var numeric = th.dataset.sort === "number", body = table.tBodies[0];
      var rows = Array.from(body.rows).map(function (tr, i) { return {tr: tr, i: i, v: tr.cells[column].dataset.value}; });
      rows.sort(function (a, b) {
        var missingA = a.v === "", missingB = b.v === "";
        if (missingA || missingB) return (missingA - missingB) || a.i - b.i;
        var order = numeric ? Number(a.v) - Number(b.v) : a.v.localeCompare(b.v);
        return (descending ? -order : order) || a.i - b.i;
      });
      rows.forEach(function (r) { body.appendChild(r.tr); });
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
  });
})();
