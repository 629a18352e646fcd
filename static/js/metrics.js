// The registry of step metrics (training/metrics.py), which the page embeds as JSON
// (<script id="metric-registry">): each key's label, its name inside its charts (legend), unit and
// charts, and the charts themselves. The pages name metrics only through it; a key it does not define
// (a trainer older or newer than this page) is shown as the key.
var CrucibleMetrics = (function () {
  "use strict";
  var el = document.getElementById("metric-registry");
  var registry = el ? JSON.parse(el.textContent) : {metrics: [], charts: []};
  var exact = new Map(), families = [];
  registry.metrics.forEach(function (m) { if (m.prefix) families.push(m); else exact.set(m.key, m); });

  // -> {metric, name} (name: what a family's placeholder matched, e.g. "broad_except" of flags/<flag>) or null
  function find(key) {
    if (exact.has(key)) return {metric: exact.get(key), name: ""};
    for (var i = 0; i < families.length; i++) {
      var rest = key.slice(families[i].prefix.length);
      if (key.indexOf(families[i].prefix) === 0 && /^[A-Za-z0-9_]+$/.test(rest)) return {metric: families[i], name: rest};
    }
    return null;
  }

  function named(key, field) {
    var found = find(key);
    return found ? found.metric[field].replace("{name}", found.name) : key;
  }

  return {
    label: function (key) { return named(key, "label"); },    // on its own (the compare picker)
    legend: function (key) { return named(key, "legend"); },  // inside its chart
    charts: function (key) { var found = find(key); return found ? found.metric.charts : []; },
    chartList: registry.charts,
  };
})();

// Chart habits of W&B and TensorBoard users, shared by the run page and compare: EMA smoothing,
// integer step ticks, x by step / wall time / tokens, a hover that lists every line, CSV and PNG
// export, one colour per run.
var CrucibleCharts = (function () {
  "use strict";
  // Plotly's default palette, so a run keeps its colour on every page (by id, not by position).
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];

  function runColour(id) { return PALETTE[((Number(id) % PALETTE.length) + PALETTE.length) % PALETTE.length]; }

  // TensorBoard's debiased EMA: weight in [0, 1); 0 leaves the values as they are.
  function ema(values, weight) {
    if (!(weight > 0)) return values.slice();
    var last = 0, out = [];
    values.forEach(function (v, i) {
      last = last * weight + (1 - weight) * v;
      out.push(last / (1 - Math.pow(weight, i + 1)));
    });
    return out;
  }

  // Whole-number ticks on a step axis: a step 1, 2, 5 × 10^k apart, about eight across.
  function stepAxis(maxStep) {
    var raw = Math.max(1, maxStep / 8), pow = Math.pow(10, Math.floor(Math.log10(raw)));
    var nice = [1, 2, 5, 10].map(function (m) { return m * pow; }).find(function (d) { return d >= raw; });
    return {tickmode: "linear", tick0: 0, dtick: Math.max(1, nice), tickformat: "d"};
  }

  // The x axis by step, wall time or generated tokens, for one run's metric rows ([{step, metrics,
  // time}] ordered by step, as the pages embed them). Returns step -> x, or null where the axis has no
  // value for that step; step 0 (the evaluation before training) is 0 on every axis.
  // Wall time counts minutes from the start of the first step (its rollout began time/step_s before
  // its end time). Tokens are the running sum of tokens_per_s × time/rollout_s: tokens_per_s counts
  // completion tokens per second of rollout time (docs/design.md "Training run events"), so the
  // product is exactly a step's tokens.
  var X_TITLES = {step: "step", time: "wall time (min)", tokens: "generated tokens"};

  function xScale(rows, mode) {
    if (mode !== "time" && mode !== "tokens") return function (step) { return step; };
    var at = new Map();
    if (mode === "time") {
      var first = rows.find(function (r) { return typeof r.time === "number"; });
      var t0 = first ? first.time - (first.metrics["time/step_s"] || 0) : 0;
      rows.forEach(function (r) { if (typeof r.time === "number") at.set(r.step, (r.time - t0) / 60); });
    } else {
      var total = 0;
      rows.forEach(function (r) {
        var m = r.metrics;
        if (typeof m.tokens_per_s !== "number" || typeof m["time/rollout_s"] !== "number") return;
        total += m.tokens_per_s * m["time/rollout_s"];
        at.set(r.step, total);
      });
    }
    return function (step) {
      if (step === 0 && (mode === "tokens" || !at.has(0))) return 0;
      return at.has(step) ? at.get(step) : null;
    };
  }

  function xTitle(mode) { return X_TITLES[mode] || X_TITLES.step; }

  // Axis settings for the chosen x: whole-number step ticks, or SI-prefixed tokens, or minutes.
  function xAxis(mode, maxStep) {
    if (mode === "tokens") return {tickformat: "~s"};
    if (mode === "time") return {tickformat: ",.1f"};
    return stepAxis(maxStep);
  }

  // A series drawn under later ones at (nearly) the same values is invisible (the reward chart's
  // "format", 1.0 at every step under another dimension at 1.0): such a trace gets open markers, which
  // ring the line on top, and its legend entry says what it sits under. Pure on Plotly trace objects;
  // `plainName` keeps its own name for the CSV. "Nearly": within 1% of the chart's y span.
  function revealHidden(traces) {
    var shown = traces.filter(function (t) { return t.meta !== "raw" && t.meta !== "guide" && t.x.length; });
    var ys = [].concat.apply([], shown.map(function (t) { return t.y; })).filter(function (v) { return typeof v === "number"; });
    var span = ys.length ? Math.max.apply(null, ys) - Math.min.apply(null, ys) : 0;
    var tol = 0.01 * (span || Math.abs(ys[0] || 1));
    shown.forEach(function (t, i) {
      var above = shown.slice(i + 1), over = new Set(), covered = 0;
      t.x.forEach(function (x, k) {
        var on = above.filter(function (u) { var j = u.x.indexOf(x); return j >= 0 && Math.abs(u.y[j] - t.y[k]) <= tol; });
        if (on.length) { covered += 1; on.forEach(function (u) { over.add(u.plainName || u.name); }); }
      });
      if (covered < Math.max(1, t.x.length / 2)) return;
      t.plainName = t.plainName || t.name;
      t.name = t.plainName + " (under " + Array.from(over).join(", ") + ")";
      t.mode = "lines+markers";
      t.marker = {symbol: "circle-open", size: 9, color: (t.line || {}).color, line: {width: 2, color: (t.line || {}).color}};
    });
    return traces;
  }

  function csv(traces, xTitle) {
    var shown = traces.filter(function (t) { return t.meta !== "raw" && t.meta !== "guide"; });
    var xs = Array.from(new Set([].concat.apply([], shown.map(function (t) { return t.x; })))).sort(function (a, b) { return a - b; });
    var quote = function (s) { return /[",\n]/.test(s) ? '"' + String(s).replace(/"/g, '""') + '"' : s; };
    var rows = [[xTitle].concat(shown.map(function (t) { return quote(t.plainName || t.name); })).join(",")];
    xs.forEach(function (x) {
      rows.push([x].concat(shown.map(function (t) {
        var i = t.x.indexOf(x);
        return i < 0 ? "" : (t.rawY || t.y)[i];
      })).join(","));
    });
    return rows.join("\n") + "\n";
  }

  function download(name, text) {
    var a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([text], {type: "text/csv"}));
    a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
  }

  // Plotly config: PNG under a useful name, a CSV button beside it, no logo; the toolbar always shown
  // (on hover only, its CSV export went unfound), with the zoom buttons a wheel or a drag already does.
  function config(filename, xTitle) {
    return {displaylogo: false, responsive: true, displayModeBar: true,
            toImageButtonOptions: {format: "png", filename: filename, scale: 2},
            modeBarButtonsToRemove: ["lasso2d", "select2d", "zoomIn2d", "zoomOut2d"],
            modeBarButtonsToAdd: [{name: "Download the data as CSV", icon: Plotly.Icons.disk,
                                   click: function (gd) { download(filename + ".csv", csv(gd.data, xTitle())); }}]};
  }

  // The title left and the toolbar right, so the toolbar never sits on the title.
  function title(text) { return {text: text, font: {size: 13}, x: 0.01, xanchor: "left", y: 0.97, yanchor: "top"}; }

  return {runColour: runColour, ema: ema, stepAxis: stepAxis, xScale: xScale, xTitle: xTitle, xAxis: xAxis,
          csv: csv, config: config, title: title, palette: PALETTE, revealHidden: revealHidden};
})();
