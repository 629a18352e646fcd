// Run page: charts, problems, health and checkpoints from the embedded state, then live over
// /ws/runs/<id>/ (reconnects with backoff; passes since=<last step>&after=<last seq>; points keyed by
// step so a replayed or repeated step never adds a second point).
// What it reads off the API (tests/webapp/core/test_page_api_fields.py holds these to the API schema):
// @api GET /api/runs/{run_id} queue queue.text
// @api GET /api/runs/{run_id}/checkpoints [].step [].kind [].heldout_pass_at_1 [].size_bytes [].best [].download_url
// The embedded state (webapp/runs/views.py) and the run's events (docs/design.md "Training run events"):
// @reads-elsewhere config_facts problems_per_step epochs_per_batch single_minibatch kl_coef mismatch_kl_threshold last_seq
// @reads-elsewhere problem_id solve_rate solve_rate_turn1 zero_variance_groups problem_row problem_rows per_problem mismatch_warning
// @reads-elsewhere tokens_per_s time/rollout_s time/step_s reward/mean pass@1 pass@k pass@1/turn1 pass@1/train
(function () {
  "use strict";
  var state = JSON.parse(document.getElementById("run-state").textContent);
  // The run statuses by group and role, from the Run model (webapp/runs/models.py status_groups).
  var STATUS = JSON.parse(document.getElementById("run-statuses").textContent);
  function statusIn(group, status) { return STATUS[group].indexOf(status) >= 0; }
  var run = state.run;
  var metrics = new Map();          // step -> {metrics, time}
  var evals = state.evals.slice();
  var problems = new Map();         // problem_id -> its row as the server stored it (queries.PROBLEM_ROW)
  var health = state.health;        // queries.sandbox_health; each problem message brings it anew
  var lastSeq = state.last_seq;
  var finished = statusIn("finished", run.status);
  var openProblem = null, openStatus = "failed", openFlag = "", openStep = null, openPage = 1;

  state.metrics.forEach(function (m) { metrics.set(m.step, {metrics: m.metrics, time: m.time}); });
  state.problems.forEach(function (p) { problems.set(p.problem_id, p); });

  // ---- charts ------------------------------------------------------------------------------------
  // The charts, the metrics each draws and their names come from the registry of step metrics
  // (training/metrics.py, embedded for CrucibleMetrics). Here only how a chart reads beyond that: its
  // y axis by the registry's scale, and what some draw besides their metrics (held-out evaluations, a
  // reference line, a warning threshold).
  var SCALES = {
    share: {tickformat: ".0%", range: [0, 1.02]}, percent: {tickformat: ".0%", rangemode: "tozero"},
    unit: {range: [0, 1.02]}, zero: {rangemode: "tozero"}, count: {rangemode: "tozero", tickformat: "d"},
    log: {type: "log", exponentformat: "power"}, linear: {},
  };
  var BEHAVIOUR = {
    pass: {evals: true},
    // Multi-turn repair (sampling.turns > 1; the chart exists only on such runs' pages).
    repair: {evals: true, evalKey: "pass@1/turn1"},
    // Same weights, two code paths: ~0 when they agree, so a log axis shows both noise and trouble.
    mismatch: {threshold: state.mismatch_kl_threshold, positive: true},
    // Where the learning signal comes from: groups whose candidates differ in reward. With dynamic
    // sampling (sampling/*) the step draws more problems until problems_per_step groups are informative.
    // Without dynamic sampling the trainer reports only zero_variance_groups: every step samples and
    // uses problems_per_step groups, drawn as a dashed reference so the one measured line reads against it.
    groups: {reference: function (keys) {
      var n = (state.config_facts || {}).problems_per_step;
      if ((state.config_facts || {}).dynamic || keys.some(function (k) { return k.indexOf("sampling/") === 0; }) || !n) return null;
      return {value: n, name: "sampled = used: " + n + " (no dynamic sampling)"};
    }},
  };
  var CHARTS = CrucibleMetrics.chartList.map(function (c) {
    return Object.assign({
      id: "chart-" + c.name, title: c.title, total: c.total,
      y: Object.assign({title: {text: c.axis}}, SCALES[c.scale] || {}),
      keys: function (k) { return CrucibleMetrics.charts(k).indexOf(c.name) >= 0; },
      label: CrucibleMetrics.legend,
    }, BEHAVIOUR[c.name] || {});
  });
  // The legend sits under the x-axis title, with room for two rows of entries.
  var LAYOUT = {margin: {l: 56, r: 12, t: 34, b: 78}, font: {size: 11},
                legend: {orientation: "h", x: 0, y: -0.3, yanchor: "top", font: {size: 10}},
                xaxis: {title: {text: "step", standoff: 4}, rangemode: "tozero"}};

  function sortedSteps() { return Array.from(metrics.keys()).sort(function (a, b) { return a - b; }); }

  function emptyLayout(text) {
    return {xaxis: {visible: false}, yaxis: {visible: false}, margin: {l: 10, r: 10, t: 34, b: 10},
            annotations: [{text: text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
                           font: {size: 12, color: "#6b7280"}}]};
  }

  // ---- chart controls (kept per browser, as W&B and TensorBoard do) -------------------------------
  var controls = {smoothing: 0, logY: false, x: "step"};
  try { Object.assign(controls, JSON.parse(localStorage.getItem("crucible.charts") || "{}")); } catch (e) { /* defaults */ }
  var smoothingInput = document.getElementById("chart-smoothing"), logInput = document.getElementById("chart-log-y");
  var xInput = document.getElementById("chart-x");
  smoothingInput.value = controls.smoothing; logInput.checked = controls.logY; xInput.value = controls.x;
  function readControls() {
    controls = {smoothing: Number(smoothingInput.value), logY: logInput.checked, x: xInput.value};
    document.getElementById("chart-smoothing-value").textContent = controls.smoothing.toFixed(2);
    try { localStorage.setItem("crucible.charts", JSON.stringify(controls)); } catch (e) { /* private mode */ }
  }
  [smoothingInput, logInput, xInput].forEach(function (el) {
    el.addEventListener("input", function () { readControls(); drawCharts(); });
  });
  readControls();

  // Panels that are 0 at every step by construction are folded under "more" with the reason.
  var facts = state.config_facts || {};
  var ZERO_REASONS = {
    "chart-clip": function () {
      if (facts.epochs_per_batch === 1 && facts.single_minibatch) {
        return "0 by construction: one PPO epoch over the whole batch updates the policy that sampled it, " +
          "so every probability ratio is 1 and nothing is clipped (more epochs or smaller minibatches change that).";
      }
      return null;
    },
    "chart-kl": function (steps) {
      if (facts.kl_coef === 0) return "kl_coef is 0: the run has no KL term.";
      if (steps <= 1) return "0 at the first step by construction: the policy starts as the reference model.";
      return null;
    },
  };

  // Generated tokens up to each step: tokens_per_s counts completion tokens per second of rollout
  // time (docs/design.md "Training run events"), so tokens_per_s × time/rollout_s is exactly the
  // step's tokens.
  function cumulativeTokens(steps) {
    var total = 0, out = new Map();
    steps.forEach(function (s) {
      var m = metrics.get(s).metrics;
      if (typeof m.tokens_per_s !== "number" || typeof m["time/rollout_s"] !== "number") return;
      total += m.tokens_per_s * m["time/rollout_s"];
      out.set(s, total);
    });
    return out;
  }
  var tokensAt = new Map();

  function xOf(step, t0) {
    if (controls.x === "step") return step;
    if (controls.x === "tokens") return step === 0 ? 0 : (tokensAt.has(step) ? tokensAt.get(step) : null);
    var m = metrics.get(step);
    if (m && typeof m.time === "number") return (m.time - t0) / 60;
    return step === 0 ? 0 : null;  // the evaluation before training
  }

  function drawCharts() {
    var steps = sortedSteps();
    var allKeys = new Set();
    steps.forEach(function (s) { Object.keys(metrics.get(s).metrics).forEach(function (k) { allKeys.add(k); }); });
    var timed = steps.filter(function (s) { return typeof metrics.get(s).time === "number"; });
    // Wall time counts from the start of the first step (its rollout began before its end time).
    var t0 = timed.length ? metrics.get(timed[0]).time - ((metrics.get(timed[0]).metrics["time/step_s"]) || 0) : 0;
    if (controls.x === "tokens") tokensAt = cumulativeTokens(steps);
    var xTitle = {step: "step", time: "wall time (min)", tokens: "generated tokens"}[controls.x] || "step";
    var maxStep = steps.length ? steps[steps.length - 1] : 1;
    var folded = [];
    CHARTS.forEach(function (chart) {
      if (!document.getElementById(chart.id)) return;  // a chart this run's page does not have
      var keys = Array.from(allKeys).filter(chart.keys).sort(function (a, b) {
        return (b === chart.total) - (a === chart.total) || (a < b ? -1 : 1);  // the total first
      });
      var logY = controls.logY || (chart.y && chart.y.type === "log");
      var traces = [];
      keys.forEach(function (key, i) {
        var xs = [], ys = [];
        steps.forEach(function (s) {
          var v = metrics.get(s).metrics[key], x = xOf(s, t0);
          if (typeof v === "number" && x !== null && !((chart.positive || logY) && v <= 0)) { xs.push(x); ys.push(v); }  // log axis: no 0
        });
        var colour = key === chart.total ? "#111827" : CrucibleCharts.palette[i % CrucibleCharts.palette.length];
        var smooth = controls.smoothing > 0 && xs.length > 1;
        var trace = {x: xs, y: CrucibleCharts.ema(ys, controls.smoothing), rawY: ys, name: chart.label(key),
                     mode: xs.length > 30 || smooth ? "lines" : "lines+markers", type: "scatter",
                     line: {color: colour, width: key === chart.total ? 3 : 2},
                     hovertemplate: "%{y:.4g}" + (smooth ? " (smoothed)" : "") + "<extra>" + chart.label(key) + "</extra>"};
        if (smooth) {  // the raw values stay visible, faint, behind the smoothed line
          traces.push({x: xs, y: ys, name: chart.label(key) + " (raw)", meta: "raw", mode: "lines", type: "scatter",
                       showlegend: false, hoverinfo: "skip", opacity: 0.25, line: {color: colour, width: 1}});
        }
        traces.push(trace);
      });
      var reference = chart.reference && traces.length ? chart.reference(keys) : null;
      if (reference) {
        var refXs = traces[traces.length - 1].x;
        traces.push({x: refXs, y: refXs.map(function () { return reference.value; }), name: reference.name, meta: "guide",
                     mode: "lines", type: "scatter", line: {dash: "dash", width: 1.5, color: "#6b7280"},
                     hovertemplate: "%{y}<extra>" + reference.name + "</extra>"});
      }
      if (chart.evals) {
        var byStep = evals.filter(function (e) { return e.split === "heldout" && e["pass@1"] !== null; })
          .sort(function (a, b) { return a.step - b.step; })
          .filter(function (e) { return xOf(e.step, t0) !== null && !(logY && e["pass@1"] <= 0); });
        if (byStep.length) {
          traces.push({x: byStep.map(function (e) { return xOf(e.step, t0); }), y: byStep.map(function (e) { return e["pass@1"]; }),
                       name: "held-out pass@1", mode: "lines+markers", type: "scatter", line: {width: 3, color: "#15803d"},
                       hovertemplate: "%{y:.0%}<extra>held-out pass@1</extra>"});
        }
        var turn1 = byStep.filter(function (e) { return typeof e["pass@1/turn1"] === "number" && !(logY && e["pass@1/turn1"] <= 0); });
        if (chart.evalKey && turn1.length) {
          traces.push({x: turn1.map(function (e) { return xOf(e.step, t0); }), y: turn1.map(function (e) { return e["pass@1/turn1"]; }),
                       name: "held-out pass@1 at turn 1", mode: "lines+markers", type: "scatter",
                       line: {width: 2, dash: "dot", color: "#15803d"},
                       hovertemplate: "%{y:.0%}<extra>held-out pass@1 at turn 1</extra>"});
        }
      }
      CrucibleCharts.revealHidden(traces);
      var el = document.getElementById(chart.id);
      el.dataset.points = steps.length;
      var title = CrucibleCharts.title(chart.title);
      var hasPoints = traces.some(function (t) { return t.x.length; });
      var flatZero = hasPoints && keys.length && traces.every(function (t) {
        return t.meta === "raw" || (t.rawY || t.y).every(function (v) { return v === 0; });
      });
      var reason = flatZero && ZERO_REASONS[chart.id] ? ZERO_REASONS[chart.id](steps.length) : null;
      placeChart(el, reason);
      if (reason) folded.push({title: chart.title, reason: reason});
      if (hasPoints && chart.threshold) {
        var xs = [].concat.apply([], traces.map(function (t) { return t.x; }));
        traces.push({x: [0, Math.max(1, Math.max.apply(null, xs))], y: [chart.threshold, chart.threshold], meta: "guide",
                     name: "warning above " + chart.threshold, mode: "lines", type: "scatter", hoverinfo: "skip",
                     line: {dash: "dash", width: 1.5, color: "#b91c1c"}});
      }
      var empty = finished ? "no data recorded" : "waiting for the first step…";
      if (steps.length && !keys.length) empty = "not reported by this run's trainer";
      if (!hasPoints && chart.positive && keys.length) empty = "0 at every step: the two agree exactly";
      if (!hasPoints && logY && !chart.positive && keys.length) empty = "no positive values to draw on a log axis";
      var xaxis = Object.assign({}, LAYOUT.xaxis, {title: {text: xTitle, standoff: 4}},
                                controls.x === "step" ? CrucibleCharts.stepAxis(maxStep)
                                  : {tickformat: controls.x === "tokens" ? "~s" : ",.1f"});
      var yaxis = Object.assign({automargin: true, exponentformat: "e"}, chart.y);
      if (logY) { yaxis.type = "log"; delete yaxis.range; delete yaxis.rangemode; }
      var layout = hasPoints
        ? Object.assign({}, LAYOUT, {title: title, xaxis: xaxis, yaxis: yaxis, hovermode: "x unified",
                                     showlegend: traces.filter(function (t) { return t.meta !== "raw"; }).length > 1},
                        traces.length > 1 ? {} : {margin: Object.assign({}, LAYOUT.margin, {b: 44})})
        : Object.assign(emptyLayout(empty), {title: title});
      Plotly.react(el, traces, layout, CrucibleCharts.config("run-" + run.id + "-" + chart.id.replace(/^chart-/, ""),
                                                             function () { return xTitle; }));
    });
    var more = document.getElementById("charts-more");
    more.hidden = !folded.length;
    document.getElementById("charts-more-count").textContent = folded.length + (folded.length === 1 ? " panel" : " panels");
    var list = document.getElementById("charts-more-reasons");
    list.replaceChildren.apply(list, folded.map(function (f) {
      var li = document.createElement("li"), b = document.createElement("strong");
      b.textContent = f.title + ": "; li.appendChild(b); li.appendChild(document.createTextNode(f.reason));
      return li;
    }));
  }

  // A chart moves between the main grid and the folded one; its place in CHARTS order is kept.
  function placeChart(el, reason) {
    var target = document.getElementById(reason ? "charts-folded" : "charts-main");
    el.dataset.folded = reason ? "true" : "false";
    if (el.parentNode === target) return;
    var order = CHARTS.map(function (c) { return c.id; });
    var next = Array.from(target.children).find(function (c) { return order.indexOf(c.id) > order.indexOf(el.id); });
    target.insertBefore(el, next || null);
  }
  document.getElementById("charts-more").addEventListener("toggle", function () {
    document.querySelectorAll("#charts-folded .chart").forEach(function (el) { Plotly.Plots.resize(el); });
  });

  var drawPending = false;
  function scheduleDraw() {  // at most one redraw per animation frame however fast events arrive
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(function () { drawPending = false; drawCharts(); drawProgress(); });
  }

  // ---- progress, ETA, headline, status -----------------------------------------------------------
  function duration(seconds) {
    if (!(seconds >= 0)) return "";
    if (seconds >= 3600) return (seconds / 3600).toFixed(1) + " h";
    if (seconds >= 60) return Math.floor(seconds / 60) + " min " + Math.round(seconds % 60) + " s";
    return Math.round(seconds) + " s";
  }

  function queueText(q) {
    if (!q) return "waiting for a worker";
    if (q.text) return q.text;  // the server's line: place, and the runs it waits for with their ETA
    var running = q.running ? q.running + " run" + (q.running > 1 ? "s" : "") + " running" : "no run running";
    if (q.position === 1) return "next in line (" + running + ")";
    return "number " + q.position + " in line (" + (q.position - 1) + " queued ahead, " + running + ")";
  }

  // A queued run's place changes as other runs start: ask the API until this one leaves the queue
  // (its own start arrives on the websocket).
  function followQueue() {
    if (run.status !== STATUS.queued) return;
    fetch("/api/runs/" + run.id, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (data) {
      if (run.status !== STATUS.queued) return;
      run.queue = data.queue;
      drawProgress();
    }).catch(function () { /* the text keeps its last value */ }).then(function () {
      if (run.status === STATUS.queued) setTimeout(followQueue, 10000);
    });
  }

  function drawProgress() {
    var steps = sortedSteps();
    var step = steps.length ? steps[steps.length - 1] : run.step;
    document.getElementById("run-step").textContent = step;
    document.getElementById("run-progress").style.width = (run.steps ? Math.min(100, 100 * step / run.steps) : 0) + "%";
    var eta = "";
    var timed = steps.filter(function (s) { return typeof metrics.get(s).time === "number"; });
    if (run.status === STATUS.running && timed.length >= 2 && step < run.steps) {
      var first = timed[Math.max(0, timed.length - 20)], last = timed[timed.length - 1];
      var perStep = (metrics.get(last).time - metrics.get(first).time) / (last - first);
      var left = Math.max(0, (run.steps - step) * perStep);
      eta = "ETA " + duration(left) + " · " + perStep.toFixed(1) + " s/step";
    } else if (finished) {
      // After a resume, started..finished also spans the time the run sat stopped: no duration then.
      var resumed = Number(document.getElementById("run-progress").parentNode.dataset.resumed) > 0;
      eta = run.status + (run.started && run.finished && !resumed
        ? " after " + duration((Date.parse(run.finished) - Date.parse(run.started)) / 1000) : "");
    } else if (run.status === STATUS.queued) {
      eta = "queued: " + queueText(run.queue);
    } else if (run.status === STATUS.cancelling) {
      eta = "cancelling: saving a checkpoint…";
    } else if (!finished && step === 0) {
      eta = "loading the model and sampling the first step…";
    }
    document.getElementById("run-eta").textContent = eta;
    drawStats(steps);
  }

  // The headline strip: the newest step's reward, train pass@1 and KL ("—" until a step reports them).
  function drawStats(steps) {
    var newest = steps.length ? metrics.get(steps[steps.length - 1]).metrics : {};
    function show(id, value, text) {
      document.getElementById(id).textContent = typeof value === "number" && isFinite(value) ? text(value) : "—";
    }
    show("stat-reward", newest["reward/mean"], function (v) { return v.toFixed(3); });
    show("stat-train-pass", newest["pass@1/train"], function (v) { return Math.round(v * 100) + "%"; });
    show("stat-kl", newest.kl, function (v) { return v === 0 ? "0" : Math.abs(v) < 0.001 ? v.toExponential(1) : v.toPrecision(2); });
  }

  function drawHeadline() {
    var points = evals.filter(function (e) { return e.split === "heldout" && e["pass@1"] !== null; })
      .sort(function (a, b) { return a.step - b.step; });
    if (!points.length) return;
    var before = Math.round(points[0]["pass@1"] * 100), after = Math.round(points[points.length - 1]["pass@1"] * 100);
    var delta = after - before;
    var el = document.getElementById("headline");
    el.textContent = "held-out pass@1 " + before + "% → " + after + "% ";
    var span = document.createElement("span");
    span.className = delta > 0 ? "delta-up" : delta < 0 ? "delta-down" : "delta-flat";
    span.textContent = "(" + (delta > 0 ? "+" : delta < 0 ? "" : "±") + delta + ")";
    span.title = "change in percentage points, step " + points[0].step + " → step " + points[points.length - 1].step;
    el.appendChild(span);
  }

  // Computed server-side (webapp/runs/runtime.py) for the newest step; each live step message carries its own.
  var warnedStep = -1;
  function drawMismatch(text, step) {
    if (step < warnedStep) return;  // a replayed older step never overrides a newer one
    warnedStep = step;
    var el = document.getElementById("mismatch-warning");
    el.textContent = text ? "⚠ " + text : "";
    el.hidden = !text;
  }

  // Divergence warnings (training/divergence.py, the config's monitor section): one per condition, from a
  // live `warning` event or the `done` event's list; the server renders the stored ones on a (re)load.
  function addWarning(w) {
    var list = document.getElementById("run-warnings-list");
    if (!w || typeof w.condition !== "string") return;
    if (Array.prototype.some.call(list.children, function (li) { return li.dataset.condition === w.condition; })) return;
    var li = document.createElement("li");
    li.dataset.condition = w.condition;
    li.dataset.step = w.step;
    li.textContent = "⚠ step " + w.step + ": " + w.message;
    list.appendChild(li);
    document.getElementById("run-warnings").hidden = false;
  }

  function refreshRuntime() {
    fetch("/runs/" + run.id + "/runtime", {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) { document.getElementById("runtime").innerHTML = html; })  // escaped by the template
      .catch(function () { /* the panel keeps what it showed; the next start or a reload fills it */ });
  }

  function setStatus(status, error) {
    run.status = status;
    finished = statusIn("finished", status);
    if (finished && !run.finished) run.finished = new Date().toISOString();
    if (!finished) run.finished = null;
    if (status === STATUS.running && !run.started) run.started = new Date().toISOString();
    var badge = document.getElementById("run-status");
    badge.textContent = status;
    badge.className = "status status-" + status;
    document.getElementById("cancel-form").hidden = !statusIn("active", status);
    document.getElementById("resume-form").hidden = !statusIn("resumable", status);
    var err = document.getElementById("run-error");
    if (error) { err.textContent = error; err.hidden = false; } else if (!finished) { err.hidden = true; }
    drawProgress();
  }

  // ---- problems table --------------------------------------------------------------------------
  function sparkline(history) {
    var w = 90, h = 20;
    var svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("class", "spark");
    var tip = document.createElementNS("http://www.w3.org/2000/svg", "title");
    tip.textContent = "pass rate by step (0–100%): " + history.map(function (p) { return p[0] + ": " + Math.round(p[1] * 100) + "%"; }).join(", ");
    svg.appendChild(tip);
    if (!history.length) return svg;
    var first = history[0][0], last = history[history.length - 1][0], span = Math.max(1, last - first);
    var pts = history.map(function (p) {
      return ((p[0] - first) / span * (w - 4) + 2).toFixed(1) + "," + (h - 2 - p[1] * (h - 4)).toFixed(1);
    });
    if (pts.length === 1) pts.push((w - 2) + "," + pts[0].split(",")[1]);
    var line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#c2410c"); line.setAttribute("stroke-width", "1.5");
    svg.appendChild(line);
    return svg;
  }

  var filterInput = document.getElementById("problem-filter");
  // Train problems (the ones with candidates to inspect) first, then held-out; each worst first.
  function problemOrder(a, b) {
    return (a.split === "heldout") - (b.split === "heldout") || a.solve_rate - b.solve_rate ||
      (a.problem_id < b.problem_id ? -1 : 1);
  }
  // Live updates change rows where they are: a row never moves under the pointer (clicks hit rows
  // that had just moved). New problems join at the end, marked; "sort now" puts the rows in order.
  var rowOrder = null, newRows = new Set();
  function buildRow(p) {
    var tr = document.createElement("tr");
    tr.className = "clickable";
    tr.dataset.problem = p.problem_id;
    if (p.problem_id === openProblem) tr.classList.add("selected");
    [p.problem_id, p.split, Math.round(p.solve_rate * 100) + "%"].forEach(function (text) {
      var td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
    });
    if (typeof p.solve_rate_turn1 === "number") {  // multi-turn: how many passed at their first turn
      var turn1 = document.createElement("span");
      turn1.className = "muted small turn1-rate";
      turn1.title = "passing at their first turn (the rate before it counts those repaired by a later turn)";
      turn1.textContent = " (turn 1: " + Math.round(p.solve_rate_turn1 * 100) + "%)";
      tr.children[2].appendChild(turn1);
    }
    var change = document.createElement("td");
    change.className = "nowrap";
    if (p.history.length) {
      var first = p.history[0], last = p.history[p.history.length - 1];
      change.title = (p.split === "heldout" ? "held-out pass@1 at the evaluation of step " : "pass rate at step ") +
        first[0] + " → step " + last[0];
      if (p.split === "heldout") {
        // Each end opens the samples of its evaluation: before training → the latest.
        change.append(evalLink(p.problem_id, first, "before"), " → ", evalLink(p.problem_id, last, "after"));
      } else {
        change.textContent = Math.round(first[1] * 100) + "% → " + Math.round(last[1] * 100) + "%";
      }
    }
    tr.appendChild(change);
    var spark = document.createElement("td"); spark.appendChild(sparkline(p.history)); tr.appendChild(spark);
    var zv = document.createElement("td"); zv.textContent = p.split === "heldout" ? "—" : p.zero_variance_groups; tr.appendChild(zv);
    return tr;
  }
  // The same row element stays: its cells take the new content only where it changed.
  function updateRow(tr, fresh) {
    tr.className = fresh.className;
    if (tr.children.length !== fresh.children.length) { tr.replaceChildren.apply(tr, Array.from(fresh.children)); return; }
    Array.from(fresh.children).forEach(function (td, i) {
      var old = tr.children[i];
      if (old.innerHTML === td.innerHTML && old.title === td.title) return;
      old.replaceChildren.apply(old, Array.from(td.childNodes));
      old.title = td.title; old.className = td.className;
    });
  }
  function drawProblems(resort) {
    var body = document.getElementById("problems");
    var filter = filterInput.value.toLowerCase();
    var sorted = Array.from(problems.values()).sort(problemOrder).map(function (p) { return p.problem_id; });
    if (resort === true || rowOrder === null || !rowOrder.length) { rowOrder = sorted; newRows.clear(); }
    else sorted.forEach(function (id) { if (rowOrder.indexOf(id) < 0) { rowOrder.push(id); newRows.add(id); } });
    var existing = new Map();
    body.querySelectorAll("tr[data-problem]").forEach(function (tr) { existing.set(tr.dataset.problem, tr); });
    var rows = rowOrder.filter(function (id) { return problems.has(id) && (!filter || id.toLowerCase().indexOf(filter) >= 0); })
      .map(function (id) {
        var fresh = buildRow(problems.get(id)), tr = existing.get(id);
        if (tr) updateRow(tr, fresh); else tr = fresh;
        tr.classList.toggle("new-row", newRows.has(id));
        return tr;
      });
    if (!rows.length) {
      var empty = document.createElement("tr"), cell = document.createElement("td");
      cell.colSpan = 6; cell.className = "muted";
      cell.textContent = problems.size ? "No problem id contains “" + filterInput.value + "”."
        : finished ? "No problem was sampled." : "Problems appear here as the first step samples them.";
      empty.appendChild(cell); rows = [empty];
    }
    // Only what moved is moved (re-inserting a row under a pressed button would lose the click).
    Array.from(body.children).forEach(function (tr) { if (rows.indexOf(tr) < 0) tr.remove(); });
    rows.forEach(function (tr, i) { if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null); });
    var stale = rowOrder.filter(function (id) { return problems.has(id); }).join("\n") !== sorted.join("\n");
    var sortButton = document.getElementById("problems-sort");
    sortButton.hidden = !stale;
    sortButton.textContent = "sort now" + (newRows.size ? " (" + newRows.size + " new)" : "");
  }
  document.getElementById("problems-sort").addEventListener("click", function () { drawProblems(true); });
  function evalLink(problemId, point, which) {
    var a = document.createElement("a");
    a.href = "#"; a.className = "eval-samples " + which;
    a.dataset.openProblem = problemId; a.dataset.status = ""; a.dataset.evalStep = point[0];
    a.textContent = Math.round(point[1] * 100) + "%";
    a.title = "the samples of the evaluation at step " + point[0];
    return a;
  }
  var problemsPending = null;
  function scheduleProblems() {
    if (problemsPending) return;
    problemsPending = setTimeout(function () { problemsPending = null; drawProblems(); drawHealth(); }, 250);
  }
  filterInput.addEventListener("input", function () { drawProblems(); });

  document.getElementById("problems").addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-problem]");
    if (e.target.closest("a")) return;  // a link in the row opens what it names (the document handler)
    if (tr) loadCandidates(tr.dataset.problem, problems.get(tr.dataset.problem).split === "heldout" ? "" : "failed", "", null, null);
  });

  // status: "failed", "passed" or "" (all); flag: a flag name or "" (any); focus: {step, index} of a
  // candidate to open and scroll to once loaded; step: only that step's candidates (a held-out problem:
  // that evaluation's samples; null or "": every step; undefined: keep the current choice).
  // page: which 50 (1: the newest; undefined: the same page while problem, status, flag and step stay).
  function loadCandidates(problemId, status, flag, focus, step, page) {
    var samePick = openProblem === problemId && openStatus === status && openFlag === (flag || "") &&
      (step === undefined || openStep === (step === null || step === "" ? null : Number(step)));
    openPage = page !== undefined ? Number(page) : samePick ? openPage : 1;
    if (openProblem !== problemId) {
      openProblem = problemId;
      document.querySelectorAll("#problems tr.selected").forEach(function (tr) { tr.classList.remove("selected"); });
      var row = document.querySelector('#problems tr[data-problem="' + CSS.escape(problemId) + '"]');
      if (row) row.classList.add("selected");
    }
    openStatus = status; openFlag = flag || "";
    if (step !== undefined) openStep = step === null || step === "" ? null : Number(step);
    var query = new URLSearchParams();
    if (status) query.set("status", status);
    if (openFlag) query.set("flag", openFlag);
    if (openStep !== null) query.set("step", openStep);
    if (openPage > 1) query.set("page", openPage);
    var url = "/runs/" + run.id + "/problems/" + encodeURIComponent(problemId) + "/candidates" +
      (query.toString() ? "?" + query : "");
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var box = document.getElementById("candidates");
      // A live refresh of the same problem keeps the candidates the user expanded or collapsed.
      var stepText = openStep === null ? "" : String(openStep);
      var same = box.dataset.problem === problemId && box.dataset.status === (status || "") &&
        box.dataset.flag === openFlag && box.dataset.step === stepText && box.dataset.page === String(openPage);
      var open = same ? Array.from(box.querySelectorAll("details.candidate")).map(function (d) {
        return [d.dataset.step + ":" + d.dataset.index, d.open];
      }) : [];
      var anchor = same ? readingAnchor(box) : null;
      if (!same) openGroup = null;
      box.innerHTML = html;  // server-rendered, escaped by the template
      box.dataset.problem = problemId; box.dataset.status = status || ""; box.dataset.flag = openFlag;
      box.dataset.step = stepText; box.dataset.page = String(openPage);
      if (open.length) {
        var wasOpen = new Map(open);
        box.querySelectorAll("details.candidate").forEach(function (d) {
          var key = d.dataset.step + ":" + d.dataset.index;
          if (wasOpen.has(key)) d.open = wasOpen.get(key);
          else { d.open = false; d.classList.add("new-candidate"); }  // arrived while one reads: marked, closed
        });
      }
      markGroup(box);
      if (anchor) keepInPlace(box, anchor);
      if (focus) {
        var picked = box.querySelector('details.candidate[data-step="' + focus.step + '"][data-index="' + focus.index + '"]');
        if (picked) {
          box.querySelectorAll("details.candidate[open]").forEach(function (d) { d.open = d === picked; });
          picked.open = true;
          picked.scrollIntoView({block: "nearest"});
        }
      }
    }).catch(function (err) {
      document.getElementById("candidates").textContent = "Could not load candidates: " + err.message;
    });
  }
  // What the reader looks at (the open candidate nearest the top of the view, else the first one in
  // view) and where it is on screen, so a live refresh that adds newer candidates above leaves it there.
  function readingAnchor(box) {
    var all = Array.from(box.querySelectorAll("details.candidate"));
    var visible = function (d) { var r = d.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; };
    var el = all.find(function (d) { return d.open && visible(d); }) || all.find(visible);
    return el ? {key: el.dataset.step + ":" + el.dataset.index, top: el.getBoundingClientRect().top} : null;
  }
  function keepInPlace(box, anchor) {
    var parts = anchor.key.split(":");
    var el = box.querySelector('details.candidate[data-step="' + parts[0] + '"][data-index="' + parts[1] + '"]');
    if (!el) return;
    var shift = el.getBoundingClientRect().top - anchor.top;
    if (Math.abs(shift) < 1) return;
    var card = box.closest(".candidates-card");
    if (card && card.scrollHeight > card.clientHeight) card.scrollTop += shift;
    var left = el.getBoundingClientRect().top - anchor.top;  // what the card could not absorb
    if (Math.abs(left) >= 1) window.scrollBy(0, left);
  }

  // A group of failing candidates (by identical code or first error): its members on this page marked,
  // its newest opened; picked again, unmarked. The pick holds across live refreshes of the same list.
  var openGroup = null;
  function markGroup(box) {
    box.querySelectorAll("details.candidate.in-group").forEach(function (d) { d.classList.remove("in-group"); });
    box.querySelectorAll(".candidate-groups a.active").forEach(function (a) { a.classList.remove("active"); });
    if (!openGroup) return;
    var link = box.querySelector('.candidate-groups a[data-group-kind="' + openGroup.kind + '"][data-group="' + openGroup.id + '"]');
    if (!link) { openGroup = null; return; }
    link.classList.add("active");
    box.querySelectorAll("details.candidate[data-" + openGroup.kind + '-group="' + openGroup.id + '"]').forEach(function (d) {
      d.classList.add("in-group");
    });
  }
  function pickGroup(box, a) {
    var same = openGroup && openGroup.kind === a.dataset.groupKind && openGroup.id === a.dataset.group;
    openGroup = same ? null : {kind: a.dataset.groupKind, id: a.dataset.group};
    markGroup(box);
    if (!openGroup) return;
    var newest = box.querySelector('details.candidate[data-step="' + a.dataset.newestStep + '"][data-index="' + a.dataset.newestIndex + '"]');
    if (newest) { newest.open = true; newest.scrollIntoView({block: "nearest"}); }
  }

  document.getElementById("candidates").addEventListener("click", function (e) {
    var group = e.target.closest("a[data-group-kind]");
    if (group) { e.preventDefault(); pickGroup(document.getElementById("candidates"), group); return; }
    var a = e.target.closest("a[data-status], a[data-flag], a[data-eval-step], a[data-step-filter], a[data-page]");
    if (!a) return;
    e.preventDefault();
    if ("page" in a.dataset) loadCandidates(openProblem, openStatus, openFlag, null, undefined, a.dataset.page);
    else if ("status" in a.dataset) loadCandidates(openProblem, a.dataset.status, openFlag);
    else if ("flag" in a.dataset) loadCandidates(openProblem, openStatus, a.dataset.flag);
    else loadCandidates(openProblem, openStatus, openFlag, null,
                        "evalStep" in a.dataset ? a.dataset.evalStep : a.dataset.stepFilter);
  });
  // Links elsewhere on the page (the reward-integrity panel, a held-out row's before → after) open a
  // problem's candidates: data-open-problem, optional data-status, data-flag, data-eval-step (only
  // that step's) and data-step + data-index of one to open.
  document.addEventListener("click", function (e) {
    var a = e.target.closest("a[data-open-problem]");
    if (!a) return;
    e.preventDefault();
    var focus = a.dataset.step !== undefined ? {step: a.dataset.step, index: a.dataset.index} : null;
    loadCandidates(a.dataset.openProblem, a.dataset.status || "", a.dataset.flag || "", focus,
                   a.dataset.evalStep === undefined ? null : a.dataset.evalStep);
    document.querySelector(".candidates-card").scrollIntoView({block: "start", behavior: "smooth"});
  });
  // Other panels (the difficulty map) open one step's candidates of a problem: {problem, step}.
  document.addEventListener("crucible:open-candidates", function (e) {
    loadCandidates(e.detail.problem, "", "", null, e.detail.step);
    document.querySelector(".candidates-card").scrollIntoView({block: "start", behavior: "smooth"});
  });

  // ---- sandbox health, checkpoints -------------------------------------------------------------
  // The outcomes (the sandbox's enum: label, colour, infrastructure or not) and their counts come from
  // the server (queries.outcome_rows, queries.sandbox_health).
  function drawHealth() {
    var total = health.total;
    var bar = document.getElementById("health-bar"), list = document.getElementById("health");
    bar.replaceChildren(); list.replaceChildren();
    state.outcomes.forEach(function (o) {
      var n = health.counts[o.status] || 0;
      var seg = document.createElement("div");
      seg.style.width = (total ? 100 * n / total : 0) + "%"; seg.style.background = o.colour; seg.title = o.label + ": " + n;
      bar.appendChild(seg);
      var dt = document.createElement("dt"); dt.textContent = o.label;
      var dd = document.createElement("dd"); dd.textContent = n + (total ? " (" + Math.round(100 * n / total) + "%)" : "");
      list.appendChild(dt); list.appendChild(dd);
    });
    var dt = document.createElement("dt"); dt.textContent = "infrastructure failures";
    var dd = document.createElement("dd"); dd.innerHTML = "<strong></strong>"; dd.firstChild.textContent = health.infrastructure + " of " + total;
    list.appendChild(dt); list.appendChild(dd);
  }

  function humanSize(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  // The headline's links: how many checkpoints, and the best one's archive (the highest held-out
  // pass@1; without evaluations the newest), so neither waits below the charts.
  function drawCheckpointLinks(list) {
    document.getElementById("checkpoint-count").textContent = list.length;
    var best = list.filter(function (c) { return c.best; }).pop();
    var pick = best || list[list.length - 1];
    var a = document.getElementById("download-best");
    a.hidden = !pick;
    if (!pick) return;
    a.href = pick.download_url;
    a.textContent = (best ? "download best" : "download latest") + " (step " + pick.step + ")";
    a.title = best ? "the checkpoint at the step with the highest held-out pass@1 (" +
      Math.round(pick.heldout_pass_at_1 * 100) + "%), as .tar.gz" : "no held-out evaluation picks a best one: the newest checkpoint, as .tar.gz";
  }
  document.getElementById("headline-checkpoints").addEventListener("click", function (e) {
    e.preventDefault();
    var card = document.getElementById("checkpoints-card");
    card.querySelector("details.fold").open = true;  // folded earlier in this browser: open it to show it
    card.scrollIntoView({block: "start", behavior: "smooth"});
  });
  function drawCheckpoints(list) {
    drawCheckpointLinks(list);
    var body = document.getElementById("checkpoints");
    body.replaceChildren();
    if (!list.length) {
      var tr = document.createElement("tr"), td = document.createElement("td");
      td.colSpan = 5; td.className = "muted"; td.textContent = "none yet"; tr.appendChild(td); body.appendChild(tr);
    }
    list.forEach(function (c) {
      var tr = document.createElement("tr");
      var pass = c.heldout_pass_at_1 === null || c.heldout_pass_at_1 === undefined ? "—" : Math.round(c.heldout_pass_at_1 * 100) + "%";
      [c.step, c.kind, pass, humanSize(c.size_bytes)].forEach(function (t) { var td = document.createElement("td"); td.textContent = t; tr.appendChild(td); });
      if (c.best) {
        tr.classList.add("best-checkpoint");
        var badge = document.createElement("span");
        badge.className = "status status-succeeded"; badge.textContent = "best";
        badge.title = "highest held-out pass@1 of this run's evaluations";
        tr.children[2].append(" ", badge);
      }
      var td = document.createElement("td"), a = document.createElement("a");
      a.href = c.download_url; a.textContent = "download .tar.gz"; a.className = "download"; a.setAttribute("download", "");
      td.appendChild(a); tr.appendChild(td); body.appendChild(tr);
    });
  }
  function refreshCheckpoints() {
    fetch("/api/runs/" + run.id + "/checkpoints", {credentials: "same-origin"})
      .then(function (r) { return r.json(); }).then(drawCheckpoints);
  }

  // ---- live events -----------------------------------------------------------------------------
  function onEvent(ev) {
    if (typeof ev.seq === "number") {
      if (ev.seq <= lastSeq) return;  // already applied (the server dedupes too; this covers reconnects)
      lastSeq = ev.seq;
    }
    // Panels with their own script (run_integrity.js) follow the same events, each applied once.
    document.dispatchEvent(new CustomEvent("crucible:run-event", {detail: ev}));
    switch (ev.event) {
      case "start":
        refreshRuntime();
        break;
      case "step":
        metrics.set(ev.step, {metrics: ev.metrics || {}, time: ev.time});
        if (ev.step > run.step) run.step = ev.step;
        if ("mismatch_warning" in ev) drawMismatch(ev.mismatch_warning, ev.step);
        scheduleDraw();
        break;
      case "problem":
        // The problem's row and the health counts as the server stored them (a replayed page carries
        // each once, on its last event that changed them).
        if (ev.problem_row) { problems.set(ev.problem_row.problem_id, ev.problem_row); scheduleProblems(); }
        if (ev.health) { health = ev.health; scheduleProblems(); }
        if (openProblem === ev.problem_id) loadCandidates(openProblem, openStatus, openFlag, null, openStep);
        break;
      case "eval":
        refreshCheckpoints();  // the best checkpoint may change
        // The evaluated problems' rows as stored (their pass@1 at this evaluation joined their history).
        (ev.problem_rows || []).forEach(function (row) { problems.set(row.problem_id, row); });
        if (ev.problem_rows) scheduleProblems();
        // An open held-out problem gains this evaluation's samples (and its pane, the evaluation's link).
        if (ev.per_problem && openProblem !== null && Object.prototype.hasOwnProperty.call(ev.per_problem, openProblem)) {
          loadCandidates(openProblem, openStatus, openFlag, null, openStep);
        }
        evals = evals.filter(function (e) { return !(e.step === ev.step && e.split === ev.split); });
        evals.push({step: ev.step, split: ev.split, "pass@1": ev["pass@1"], "pass@k": ev["pass@k"],
                    "pass@1/turn1": ev["pass@1/turn1"]});
        drawHeadline(); scheduleDraw();
        break;
      case "checkpoint":
        refreshCheckpoints();
        break;
      case "warning":
        addWarning(ev);
        break;
      case "done":
        (ev.warnings || []).forEach(addWarning);
        setStatus(ev.status, ev.error);
        refreshCheckpoints();
        break;
      case "status":
        setStatus(ev.status, ev.error);
        break;
    }
  }

  var delay = 1000, socket = null;
  function connect() {
    var steps = sortedSteps();
    var since = steps.length ? steps[steps.length - 1] : -1;
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/runs/" + run.id + "/?since=" + since + "&after=" + lastSeq;
    socket = new WebSocket(url);
    socket.onopen = function () { delay = 1000; document.body.dataset.live = "1"; };
    socket.onmessage = function (msg) { onEvent(JSON.parse(msg.data)); };
    socket.onclose = function () {
      document.body.dataset.live = "0";
      if (finished) return;  // a finished run sends nothing more
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }

  var steps0 = sortedSteps();
  drawMismatch(state.mismatch_warning, steps0.length ? steps0[steps0.length - 1] : -1);
  setTimeout(followQueue, 10000);

  document.getElementById("copy-config").addEventListener("click", function () {
    var text = document.getElementById("config-yaml").textContent;
    var done = function () { document.getElementById("copy-config-done").hidden = false; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else {  // plain http on a LAN: select the text so that Ctrl+C copies it
      var range = document.createRange();
      range.selectNodeContents(document.getElementById("config-yaml"));
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
    }
  });
  // "Compare with…": its button waits for a run to be ticked, so it never goes to a one-run compare.
  var comparePick = document.querySelector(".compare-with-form");
  var compareButton = comparePick && comparePick.querySelector("button[type=submit]");
  if (compareButton) {
    var syncCompare = function () { compareButton.disabled = !comparePick.querySelector("input[type=checkbox]:checked"); };
    comparePick.addEventListener("change", syncCompare);
    syncCompare();
  }
  drawCharts(); drawProgress(); drawProblems(); drawHealth(); drawCheckpoints(state.checkpoints);
  if (run.error) setStatus(run.status, run.error);
  connect();
})();
