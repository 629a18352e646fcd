// Run page, "Reward integrity": candidates carrying each reward-hacking flag per step (the flags/<name>
// step metrics) as a chart that follows live step messages, and the panel's tables (per-flag counts,
// the latest flagged candidates), fetched again from the server as flagged steps and candidates arrive.
// run_detail.js owns the websocket and hands every event on as a "crucible:run-event"; it also opens
// the candidates behind the tables' links (a[data-open-problem]).
(function () {
  "use strict";
  var card = document.getElementById("integrity");
  if (!card) return;
  var runId = card.dataset.run;
  var series = JSON.parse(document.getElementById("integrity-series").textContent);
  var names = Object.keys(series.counts);  // the flag vocabulary, in its order: a flag keeps its colour
  var byStep = new Map();                  // step -> {candidates, counts: {name: n or null}}
  series.steps.forEach(function (step, i) {
    var counts = {};
    names.forEach(function (name) { counts[name] = series.counts[name][i]; });
    byStep.set(step, {candidates: series.candidates[i], counts: counts});
  });
  var chart = document.getElementById("chart-flags");

  function isCount(v) { return typeof v === "number"; }

  function emptyLayout(text) {
    return {title: CrucibleCharts.title("Candidates flagged per step"), xaxis: {visible: false}, yaxis: {visible: false},
            margin: {l: 10, r: 10, t: 34, b: 10},
            annotations: [{text: text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
                           font: {size: 12, color: "#6b7280"}}]};
  }

  function draw() {
    var steps = Array.from(byStep.keys()).sort(function (a, b) { return a - b; });
    var reported = names.filter(function (n) { return steps.some(function (s) { return isCount(byStep.get(s).counts[n]); }); });
    // A flag no candidate ever carried stays off the chart (the table lists it at 0).
    var seen = reported.filter(function (n) { return steps.some(function (s) { return byStep.get(s).counts[n] > 0; }); });
    var peak = 0;
    var traces = seen.map(function (name) {
      var xs = [], ys = [], of = [];
      steps.forEach(function (s) {
        var point = byStep.get(s), v = point.counts[name];
        if (!isCount(v)) return;
        xs.push(s); ys.push(v); of.push(isCount(point.candidates) ? point.candidates : "?");
        peak = Math.max(peak, v);
      });
      var colour = CrucibleCharts.palette[names.indexOf(name) % CrucibleCharts.palette.length];
      return {x: xs, y: ys, customdata: of, name: name, type: "scatter", mode: xs.length > 30 ? "lines" : "lines+markers",
              line: {color: colour, width: 2}, hovertemplate: "%{y} of %{customdata} candidates<extra>" + name + "</extra>"};
    });
    chart.dataset.points = steps.length;
    chart.dataset.flags = seen.join(",");
    var layout;
    if (!traces.length) {
      layout = emptyLayout(!steps.length ? "no step yet" : !reported.length
        ? "not reported by this run's trainer (it predates the flags)"
        : "no candidate flagged in " + steps.length + " step" + (steps.length === 1 ? "" : "s"));
    } else {
      layout = {title: CrucibleCharts.title("Candidates flagged per step"), hovermode: "x unified", showlegend: true,
                margin: {l: 56, r: 12, t: 34, b: 78}, font: {size: 11},
                legend: {orientation: "h", x: 0, y: -0.3, yanchor: "top", font: {size: 10}},
                xaxis: Object.assign({title: {text: "step", standoff: 4}, rangemode: "tozero"},
                                     CrucibleCharts.stepAxis(steps[steps.length - 1])),
                yaxis: Object.assign({title: {text: "candidates"}, rangemode: "tozero", automargin: true, tickformat: "d"},
                                     peak <= 5 ? {dtick: 1} : {})};
    }
    Plotly.react(chart, traces, layout, CrucibleCharts.config("run-" + runId + "-flags", function () { return "step"; }));
  }

  var drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(function () { drawPending = false; draw(); });
  }

  // A step's problem events follow its step event: one fetch a second at most covers a burst of both.
  var refreshPending = null;
  function scheduleRefresh() {
    if (refreshPending) return;
    refreshPending = setTimeout(function () {
      refreshPending = null;
      fetch("/runs/" + runId + "/integrity", {credentials: "same-origin"}).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      }).then(function (html) { document.getElementById("integrity-tables").innerHTML = html; })  // escaped by the template
        .catch(function () { /* the tables keep what they showed; the next step or a reload fills them */ });
    }, 1000);
  }

  function flagged(candidate) {
    var result = candidate.result || {};
    return (result.flags || []).length > 0 || (candidate.penalized_flags || []).length > 0;
  }

  document.addEventListener("crucible:run-event", function (e) {
    var ev = e.detail;
    if (ev.event === "step" && typeof ev.step === "number") {
      var m = ev.metrics || {}, counts = {};
      names.forEach(function (name) { counts[name] = isCount(m["flags/" + name]) ? m["flags/" + name] : null; });
      byStep.set(ev.step, {candidates: isCount(m.candidates) ? m.candidates : null, counts: counts});
      scheduleDraw();
      scheduleRefresh();  // the counts table names the newest step
    } else if (ev.event === "problem" && (ev.candidates || []).some(flagged)) {
      scheduleRefresh();
    }
  });

  draw();
})();
