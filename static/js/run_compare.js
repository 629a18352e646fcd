// Compare runs: the same metric of every run on one chart; a picker for any metric any run reported.
(function () {
  "use strict";
  var series = JSON.parse(document.getElementById("compare-data").textContent);
  var LAYOUT = {margin: {l: 44, r: 10, t: 30, b: 30}, legend: {orientation: "h", y: -0.18}, font: {size: 11},
                xaxis: {title: {text: "step"}}};

  function traces(key) {
    return series.map(function (run) {
      var pts = run.metrics.filter(function (m) { return typeof m.metrics[key] === "number"; });
      return {x: pts.map(function (m) { return m.step; }), y: pts.map(function (m) { return m.metrics[key]; }),
              name: "#" + run.id + " " + run.name, mode: "lines", type: "scatter"};
    });
  }
  function plot(id, title, data) {
    Plotly.react(document.getElementById(id), data, Object.assign({}, LAYOUT, {title: {text: title, font: {size: 13}}}),
                 {displaylogo: false, responsive: true});
  }

  var keys = new Set();
  series.forEach(function (run) { run.metrics.forEach(function (m) { Object.keys(m.metrics).forEach(function (k) { keys.add(k); }); }); });
  var pick = document.getElementById("metric-pick");
  Array.from(keys).sort().forEach(function (k) {
    var o = document.createElement("option"); o.value = k; o.textContent = k; pick.appendChild(o);
  });
  if (keys.has("reward/pass_rate")) pick.value = "reward/pass_rate";
  pick.addEventListener("change", function () { plot("compare-main", pick.value, traces(pick.value)); });
  if (pick.value) plot("compare-main", pick.value, traces(pick.value));
  plot("compare-reward", "reward/mean", traces("reward/mean"));
  plot("compare-kl", "kl", traces("kl"));
  plot("compare-eval", "held-out pass@1", series.map(function (run) {
    var pts = run.evals.filter(function (e) { return e.split === "heldout" && e["pass@1"] !== null; });
    return {x: pts.map(function (e) { return e.step; }), y: pts.map(function (e) { return e["pass@1"]; }),
            name: "#" + run.id + " " + run.name, mode: "lines+markers", type: "scatter"};
  }));
})();
