// Names of the trainer's metric keys as people read them, shared by the run page and compare.
// The keys themselves (docs/design.md "Training run events") stay the contract; these are only how the pages show them.
var CrucibleMetrics = (function () {
  "use strict";
  var NAMES = {
    "reward/mean": "reward: total (weighted)", "reward/std": "reward: standard deviation",
    "reward/pass_rate": "reward: tests passed (train)", "pass@1/train": "train pass@1 (all tests pass)",
    "kl": "KL to the reference model", "clip_frac": "clip fraction", "entropy": "policy entropy",
    "grad_norm": "gradient norm", "lr": "learning rate", "tokens_per_s": "generated tokens/s",
    "time/step_s": "time: whole step (s)", "rollout/mismatch_kl": "sampler vs trainer: mismatch KL",
    "rollout/logprob_diff_max": "sampler vs trainer: largest |log-prob difference|",
    "rollout/truncated_frac": "truncated replies (hit max_new_tokens)",
    "completion_len/max": "completion length: longest", "completion_len/mean": "completion length: mean",
    "rollout/staleness": "sampler's policy: updates behind the trainer's",
    "time/wait_s": "time: waiting for the rollout sampled ahead (s)",
  };
  var PREFIXES = [["reward/", "reward: "], ["loss/", "loss: "], ["time/", "time: "], ["flags/", "flagged: "],
                  ["sampling/", "sampling: "], ["rollout/", "rollout: "], ["completion_len/", "completion length: "]];

  function label(key) {
    if (NAMES[key]) return NAMES[key];
    for (var i = 0; i < PREFIXES.length; i++) {
      var p = PREFIXES[i];
      if (key.indexOf(p[0]) === 0) {
        var rest = key.slice(p[0].length);
        var seconds = p[0] === "time/" && /_s$/.test(rest);
        return p[1] + rest.replace(/_s$/, seconds ? "" : "_s").replace(/_/g, " ") + (seconds ? " (s)" : "");
      }
    }
    return key.replace(/_/g, " ");
  }

  return {label: label};
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

  function csv(traces, xTitle) {
    var shown = traces.filter(function (t) { return t.meta !== "raw" && t.meta !== "guide"; });
    var xs = Array.from(new Set([].concat.apply([], shown.map(function (t) { return t.x; })))).sort(function (a, b) { return a - b; });
    var quote = function (s) { return /[",\n]/.test(s) ? '"' + String(s).replace(/"/g, '""') + '"' : s; };
    var rows = [[xTitle].concat(shown.map(function (t) { return quote(t.name); })).join(",")];
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
          csv: csv, config: config, title: title, palette: PALETTE};
})();
