// Run page, "Difficulty map": each train problem's group pass rate per step as a heatmap (from
// GET /api/runs/<id>/difficulty-map), sortable, with the problems that became solved and those never
// solved marked and summed up. It fetches the map again (at most once a second) as problem events
// arrive on run_detail.js's websocket ("crucible:run-event"); a click on a cell asks run_detail.js to
// open that step's candidates of the problem ("crucible:open-candidates").
// What it reads off the map (tests/webapp/core/test_page_api_fields.py holds these to the API schema):
// @api GET /api/runs/{run_id}/difficulty-map steps summary.problems summary.became_solved summary.never_solved summary.solved_from_start
// @api GET /api/runs/{run_id}/difficulty-map problems[].problem_id problems[].status problems[].history problems[].final_solve_rate problems[].first_solved_step problems[].zero_variance_groups problems[].zero_variance_steps problems[].set_aside_steps
// @reads-elsewhere became_solved never_solved solved_from_start (the status names, as MARK's keys)
(function () {
  "use strict";
  var card = document.getElementById("difficulty");
  if (!card) return;
  var runId = card.dataset.run;
  var chart = document.getElementById("chart-difficulty");
  var sortInput = document.getElementById("difficulty-sort");
  var map = null;
  var ROW_PX = 20, MARGIN = {l: 10, r: 12, t: 34, b: 46};
  var MARK = {became_solved: "▲ ", never_solved: "✗ ", solved_from_start: ""};
  var MARK_COLOUR = {became_solved: "#15803d", never_solved: "#b91c1c"};

  try { sortInput.value = localStorage.getItem("crucible.difficulty-sort") || "final"; } catch (e) { /* default */ }
  if (!sortInput.value) sortInput.value = "final";

  function byId(a, b) { return a.problem_id < b.problem_id ? -1 : a.problem_id > b.problem_id ? 1 : 0; }
  var SORTS = {
    final: function (a, b) { return a.final_solve_rate - b.final_solve_rate || byId(a, b); },
    first_solved: function (a, b) {  // the earliest solved first; never solved last
      var x = a.first_solved_step === null ? Infinity : a.first_solved_step;
      var y = b.first_solved_step === null ? Infinity : b.first_solved_step;
      return (x === y ? 0 : x < y ? -1 : 1) || byId(a, b);
    },
    zero_variance: function (a, b) { return b.zero_variance_groups - a.zero_variance_groups || byId(a, b); },
    id: byId,
  };

  function pct(v) { return Math.round(v * 100) + "%"; }
  // Plotly reads tick and hover text as its own small HTML: an id is text, never markup.
  function escape(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }

  function summaryPart(cls, mark, count, label, ids) {
    var span = document.createElement("span");
    span.className = cls;
    span.id = "difficulty-" + cls;
    span.textContent = mark + count + " " + label + (ids.length ? ": " + ids.slice(0, 8).join(", ") +
      (ids.length > 8 ? " and " + (ids.length - 8) + " more" : "") : "");
    return span;
  }

  function drawSummary(rows) {
    var el = document.getElementById("difficulty-summary");
    var s = map.summary;
    if (!s.problems) { el.textContent = ""; return; }
    var ids = function (status) { return rows.filter(function (p) { return p.status === status; }).map(function (p) { return p.problem_id; }); };
    el.replaceChildren(
      summaryPart("became", "▲ ", s.became_solved, "became solved", ids("became_solved")), document.createTextNode(" · "),
      summaryPart("never", "✗ ", s.never_solved, "never solved", ids("never_solved")), document.createTextNode(" · "),
      document.createTextNode(s.solved_from_start + " solved from the first time sampled, of " + s.problems + " train problems. "),
      solvedMeans(rows));
  }

  // "Solved" is about any step, the pass rates beside it about the last: say so, and how many of the
  // solved ones passed nothing the last time they were sampled (what reads as a contradiction otherwise).
  function solvedMeans(rows) {
    var lost = rows.filter(function (p) { return p.status !== "never_solved" && p.final_solve_rate === 0; }).length;
    var span = document.createElement("span");
    span.className = "muted";
    span.id = "difficulty-solved-means";
    span.textContent = "Solved: at least one candidate passed every test at some step (not the pass rate now); " +
      lost + " of the solved had no passing candidate the last time they were sampled.";
    return span;
  }

  function emptyLayout(text) {
    return {title: CrucibleCharts.title("Pass rate per problem and step"), xaxis: {visible: false}, yaxis: {visible: false},
            margin: {l: 10, r: 10, t: 34, b: 10}, height: 200,
            annotations: [{text: text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
                           font: {size: 12, color: "#6b7280"}}]};
  }

  function draw() {
    if (!map) return;
    var rows = map.problems.slice().sort(SORTS[sortInput.value] || SORTS.final);
    drawSummary(rows);
    var ids = rows.map(function (p) { return p.problem_id; });
    chart.dataset.order = JSON.stringify(ids);
    chart.dataset.steps = map.steps.length;
    if (!rows.length) {
      chart.style.height = "200px";
      Plotly.react(chart, [], emptyLayout("no train problem sampled yet"), CrucibleCharts.config("run-" + runId + "-difficulty", function () { return "step"; }));
      return;
    }
    var steps = map.steps, column = new Map(steps.map(function (s, i) { return [s, i]; }));
    var z = rows.map(function () { return steps.map(function () { return null; }); });
    var text = rows.map(function () { return steps.map(function () { return ""; }); });
    var asideX = [], asideY = [];
    rows.forEach(function (p, r) {
      var zero = new Set(p.zero_variance_steps), aside = new Set(p.set_aside_steps);
      p.history.forEach(function (h) {
        var c = column.get(h[0]);
        z[r][c] = h[1];
        text[r][c] = escape(p.problem_id) + " · step " + h[0] + "<br>pass rate " + pct(h[1]) +
          (zero.has(h[0]) ? "<br>zero variance: no learning signal" : "") +
          (aside.has(h[0]) ? "<br>left out of the update" : "");
        if (aside.has(h[0])) { asideX.push(h[0]); asideY.push(p.problem_id); }
      });
    });
    var traces = [{
      type: "heatmap", x: steps, y: ids, z: z, text: text, zmin: 0, zmax: 1, xgap: 1, ygap: 1, hoverongaps: false,
      colorscale: [[0, "#b91c1c"], [0.5, "#fde68a"], [1, "#15803d"]],
      hovertemplate: "%{text}<extra></extra>",
      colorbar: {title: {text: "pass rate", side: "right"}, tickformat: ".0%", thickness: 12, len: Math.min(1, 300 / (rows.length * ROW_PX))},
    }];
    if (asideX.length) {
      traces.push({type: "scatter", mode: "markers", x: asideX, y: asideY, name: "left out of the update",
                   hoverinfo: "skip", showlegend: false,
                   marker: {symbol: "circle-open", size: 9, color: "#111827", line: {width: 1.5}}});
    }
    var height = Math.max(200, rows.length * ROW_PX + MARGIN.t + MARGIN.b);
    chart.style.height = height + "px";
    var layout = {
      // The title in the top margin, in pixels: the shared title's y (a share of the height) would put it
      // among the first rows' labels of a map hundreds of rows tall.
      title: Object.assign(CrucibleCharts.title("Pass rate per problem and step"), {y: 1 - 6 / height}),
      height: height, margin: MARGIN, font: {size: 11},
      xaxis: Object.assign({title: {text: "step", standoff: 4}, side: "bottom"}, CrucibleCharts.stepAxis(steps[steps.length - 1])),
      yaxis: {type: "category", autorange: "reversed", automargin: true, tickvals: ids,
              ticktext: rows.map(function (p) {
                var mark = MARK[p.status];
                return (mark ? '<span style="color:' + MARK_COLOUR[p.status] + '">' + mark + "</span>" : "") + escape(p.problem_id);
              })},
    };
    Plotly.react(chart, traces, layout, CrucibleCharts.config("run-" + runId + "-difficulty", function () { return "step"; }));
    if (!chart.dataset.clicks) {
      chart.dataset.clicks = "1";
      chart.on("plotly_click", function (ev) {
        var pt = ev.points && ev.points[0];
        if (!pt || (pt.data.type === "heatmap" && (pt.z === null || pt.z === undefined))) return;
        document.dispatchEvent(new CustomEvent("crucible:open-candidates", {detail: {problem: pt.y, step: pt.x}}));
      });
    }
  }

  function refresh() {
    return fetch("/api/runs/" + runId + "/difficulty-map", {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (data) { map = data; draw(); })
      .catch(function () { /* the map keeps what it showed; the next problem event or a reload fills it */ });
  }

  var refreshPending = null;
  function scheduleRefresh() {  // a step's problem events come in a burst: one fetch covers it
    if (refreshPending) return;
    refreshPending = setTimeout(function () { refreshPending = null; refresh(); }, 1000);
  }

  sortInput.addEventListener("change", function () {
    try { localStorage.setItem("crucible.difficulty-sort", sortInput.value); } catch (e) { /* private mode */ }
    draw();
  });
  document.addEventListener("crucible:run-event", function (e) {
    if (e.detail.event === "problem") scheduleRefresh();
  });

  refresh();
})();
