// Run page: charts, problems, health and checkpoints from the embedded state, then live over
// /ws/runs/<id>/ (reconnects with backoff; passes since=<last step>&after=<last seq>; points keyed by
// step so a replayed or repeated step never adds a second point).
(function () {
  "use strict";
  var state = JSON.parse(document.getElementById("run-state").textContent);
  var run = state.run;
  var metrics = new Map();          // step -> {metrics, time}
  var evals = state.evals.slice();
  var problems = new Map();         // problem_id -> {problem_id, split, pass_rate, history, zero_variance_groups}
  var health = Object.assign({}, state.health.counts);
  var lastSeq = state.last_seq;
  var finished = ["succeeded", "failed", "cancelled"].indexOf(run.status) >= 0;
  var openProblem = null, openStatus = "failed";

  state.metrics.forEach(function (m) { metrics.set(m.step, {metrics: m.metrics, time: m.time}); });
  state.problems.forEach(function (p) { problems.set(p.problem_id, p); });

  // ---- charts ------------------------------------------------------------------------------------
  var CHARTS = [
    {id: "chart-reward", title: "Reward (total and each dimension)", keys: function (k) { return k.indexOf("reward/") === 0; }},
    {id: "chart-pass", title: "Pass rate", keys: function (k) { return k === "pass@1/train" || k === "reward/pass_rate"; }, evals: true},
    {id: "chart-kl", title: "KL to the reference", keys: function (k) { return k === "kl"; }},
    {id: "chart-loss", title: "Policy loss", keys: function (k) { return k.indexOf("loss/") === 0; }},
    {id: "chart-clip", title: "Clip fraction", keys: function (k) { return k === "clip_frac"; }},
    {id: "chart-entropy", title: "Entropy", keys: function (k) { return k === "entropy"; }},
    {id: "chart-tokens", title: "Generated tokens / s", keys: function (k) { return k === "tokens_per_s"; }},
    // Phases may overlap (DESIGN.md), so they are lines, not a stack.
    {id: "chart-time", title: "Time per step (s): rollout / sandbox / update", keys: function (k) { return k.indexOf("time/") === 0; }},
  ];
  var LAYOUT = {margin: {l: 44, r: 10, t: 30, b: 30}, legend: {orientation: "h", y: -0.18, font: {size: 10}},
                xaxis: {title: {text: "step"}}, font: {size: 11}};

  function sortedSteps() { return Array.from(metrics.keys()).sort(function (a, b) { return a - b; }); }

  function drawCharts() {
    var steps = sortedSteps();
    var allKeys = new Set();
    steps.forEach(function (s) { Object.keys(metrics.get(s).metrics).forEach(function (k) { allKeys.add(k); }); });
    CHARTS.forEach(function (chart) {
      var keys = Array.from(allKeys).filter(chart.keys).sort();
      var traces = keys.map(function (key) {
        var xs = [], ys = [];
        steps.forEach(function (s) {
          var v = metrics.get(s).metrics[key];
          if (typeof v === "number") { xs.push(s); ys.push(v); }
        });
        return {x: xs, y: ys, name: key, mode: xs.length > 30 ? "lines" : "lines+markers", type: "scatter"};
      });
      if (chart.evals) {
        var byStep = evals.filter(function (e) { return e.split === "heldout" && e["pass@1"] !== null; });
        traces.push({x: byStep.map(function (e) { return e.step; }), y: byStep.map(function (e) { return e["pass@1"]; }),
                     name: "held-out pass@1", mode: "lines+markers", type: "scatter"});
      }
      var el = document.getElementById(chart.id);
      el.dataset.points = steps.length;
      Plotly.react(el, traces, Object.assign({}, LAYOUT, {title: {text: chart.title, font: {size: 13}}}),
                   {displaylogo: false, responsive: true});
    });
  }

  var drawPending = false;
  function scheduleDraw() {  // at most one redraw per animation frame however fast events arrive
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(function () { drawPending = false; drawCharts(); drawProgress(); });
  }

  // ---- progress, ETA, headline, status -----------------------------------------------------------
  function drawProgress() {
    var steps = sortedSteps();
    var step = steps.length ? steps[steps.length - 1] : run.step;
    document.getElementById("run-step").textContent = step;
    document.getElementById("run-progress").style.width = (run.steps ? Math.min(100, 100 * step / run.steps) : 0) + "%";
    var eta = "";
    var timed = steps.filter(function (s) { return typeof metrics.get(s).time === "number"; });
    if (!finished && timed.length >= 2 && step < run.steps) {
      var first = timed[Math.max(0, timed.length - 20)], last = timed[timed.length - 1];
      var perStep = (metrics.get(last).time - metrics.get(first).time) / (last - first);
      var left = Math.max(0, (run.steps - step) * perStep);
      eta = "ETA " + (left >= 3600 ? (left / 3600).toFixed(1) + " h" : left >= 60 ? Math.round(left / 60) + " min" : Math.round(left) + " s")
        + " · " + perStep.toFixed(1) + " s/step";
    } else if (finished) {
      eta = run.status;
    }
    document.getElementById("run-eta").textContent = eta;
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
    span.className = delta >= 0 ? "delta-up" : "delta-down";
    span.textContent = "(" + (delta >= 0 ? "+" : "") + delta + ")";
    el.appendChild(span);
  }

  function setStatus(status, error) {
    run.status = status;
    finished = ["succeeded", "failed", "cancelled"].indexOf(status) >= 0;
    var badge = document.getElementById("run-status");
    badge.textContent = status;
    badge.className = "status status-" + status;
    document.getElementById("cancel-form").hidden = ["queued", "running", "cancelling"].indexOf(status) < 0;
    document.getElementById("resume-form").hidden = ["failed", "cancelled"].indexOf(status) < 0;
    var err = document.getElementById("run-error");
    if (error) { err.textContent = error; err.hidden = false; } else if (!finished) { err.hidden = true; }
    drawProgress();
  }

  // ---- problems table --------------------------------------------------------------------------
  function sparkline(history) {
    var w = 90, h = 20;
    var svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("class", "spark");
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
  function drawProblems() {
    var body = document.getElementById("problems");
    var filter = filterInput.value.toLowerCase();
    var rows = Array.from(problems.values())
      .filter(function (p) { return !filter || p.problem_id.toLowerCase().indexOf(filter) >= 0; })
      .sort(function (a, b) { return a.pass_rate - b.pass_rate || (a.problem_id < b.problem_id ? -1 : 1); });
    var frag = document.createDocumentFragment();
    rows.forEach(function (p) {
      var tr = document.createElement("tr");
      tr.className = "clickable";
      tr.dataset.problem = p.problem_id;
      [p.problem_id, p.split, Math.round(p.pass_rate * 100) + "%"].forEach(function (text) {
        var td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
      });
      var spark = document.createElement("td"); spark.appendChild(sparkline(p.history)); tr.appendChild(spark);
      var zv = document.createElement("td"); zv.textContent = p.zero_variance_groups; tr.appendChild(zv);
      frag.appendChild(tr);
    });
    body.replaceChildren(frag);
  }
  var problemsPending = null;
  function scheduleProblems() {
    if (problemsPending) return;
    problemsPending = setTimeout(function () { problemsPending = null; drawProblems(); drawHealth(); }, 250);
  }
  filterInput.addEventListener("input", drawProblems);

  document.getElementById("problems").addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-problem]");
    if (tr) loadCandidates(tr.dataset.problem, "failed");
  });

  function loadCandidates(problemId, status) {
    openProblem = problemId; openStatus = status;
    var url = "/runs/" + run.id + "/problems/" + encodeURIComponent(problemId) + "/candidates" + (status ? "?status=" + status : "");
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      document.getElementById("candidates").innerHTML = html;  // server-rendered, escaped by the template
    }).catch(function (err) {
      document.getElementById("candidates").textContent = "Could not load candidates: " + err.message;
    });
  }
  document.getElementById("candidates").addEventListener("click", function (e) {
    var a = e.target.closest("a[data-status]");
    if (!a) return;
    e.preventDefault();
    loadCandidates(openProblem, a.dataset.status);
  });

  // ---- sandbox health, checkpoints -------------------------------------------------------------
  var HEALTH = [["passed", "passed", "#15803d"], ["failed", "wrong answer", "#f97316"], ["error", "runtime error", "#b91c1c"],
                ["syntax_error", "syntax error", "#7f1d1d"], ["timeout", "timeout", "#b45309"],
                ["memory", "memory limit (infra)", "#6d28d9"], ["output_limit", "output limit (infra)", "#a21caf"],
                ["killed", "killed (infra)", "#111827"]];
  function drawHealth() {
    var total = Object.values(health).reduce(function (a, b) { return a + b; }, 0);
    var bar = document.getElementById("health-bar"), list = document.getElementById("health");
    bar.replaceChildren(); list.replaceChildren();
    HEALTH.forEach(function (h) {
      var n = health[h[0]] || 0;
      var seg = document.createElement("div");
      seg.style.width = (total ? 100 * n / total : 0) + "%"; seg.style.background = h[2]; seg.title = h[1] + ": " + n;
      bar.appendChild(seg);
      var dt = document.createElement("dt"); dt.textContent = h[1];
      var dd = document.createElement("dd"); dd.textContent = n + (total ? " (" + Math.round(100 * n / total) + "%)" : "");
      list.appendChild(dt); list.appendChild(dd);
    });
    var infra = (health.killed || 0) + (health.memory || 0) + (health.output_limit || 0);
    var dt = document.createElement("dt"); dt.textContent = "infrastructure failures";
    var dd = document.createElement("dd"); dd.innerHTML = "<strong></strong>"; dd.firstChild.textContent = infra + " of " + total;
    list.appendChild(dt); list.appendChild(dd);
  }

  function humanSize(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function drawCheckpoints(list) {
    var body = document.getElementById("checkpoints");
    body.replaceChildren();
    if (!list.length) {
      var tr = document.createElement("tr"), td = document.createElement("td");
      td.colSpan = 4; td.className = "muted"; td.textContent = "none yet"; tr.appendChild(td); body.appendChild(tr);
    }
    list.forEach(function (c) {
      var tr = document.createElement("tr");
      [c.step, c.kind, humanSize(c.size_bytes)].forEach(function (t) { var td = document.createElement("td"); td.textContent = t; tr.appendChild(td); });
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
    switch (ev.event) {
      case "step":
        metrics.set(ev.step, {metrics: ev.metrics || {}, time: ev.time});
        if (ev.step > run.step) run.step = ev.step;
        scheduleDraw();
        break;
      case "problem": {
        var p = problems.get(ev.problem_id) || {problem_id: ev.problem_id, split: "train", history: [], zero_variance_groups: 0};
        p.history = p.history.filter(function (h) { return h[0] !== ev.step; }).concat([[ev.step, ev.pass_rate]])
          .sort(function (a, b) { return a[0] - b[0]; });
        p.pass_rate = p.history[p.history.length - 1][1];
        if (ev.zero_variance) p.zero_variance_groups += 1;
        problems.set(ev.problem_id, p);
        (ev.candidates || []).forEach(function (c) {
          var s = (c.result && c.result.status) || "unknown";
          health[s] = (health[s] || 0) + 1;
        });
        scheduleProblems();
        if (openProblem === ev.problem_id) loadCandidates(openProblem, openStatus);
        break;
      }
      case "eval":
        evals = evals.filter(function (e) { return !(e.step === ev.step && e.split === ev.split); });
        evals.push({step: ev.step, split: ev.split, "pass@1": ev["pass@1"], "pass@k": ev["pass@k"]});
        drawHeadline(); scheduleDraw();
        break;
      case "checkpoint":
        refreshCheckpoints();
        break;
      case "done":
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
      if (finished && run.status !== "cancelling") return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }

  drawCharts(); drawProgress(); drawProblems(); drawHealth(); drawCheckpoints(state.checkpoints);
  if (run.error) setStatus(run.status, run.error);
  connect();
})();
