// Forms that ask before they post (no inline handlers: the Content-Security-Policy forbids them).
document.querySelectorAll("form[data-confirm]").forEach(function (form) {
  form.addEventListener("submit", function (e) {
    if (!confirm(form.dataset.confirm)) e.preventDefault();
  });
});

// Follow one problem set's job live: its notifications over the websocket, with polling of
// /api/problem-sets/<id> as the fallback. `show` gets the event (or the API's `key` object) until
// `finished()` says the page has what it waited for.
// What its `show`s read off the API's answer (tests/webapp/core/test_page_api_fields.py holds these to the schema):
// @api GET /api/problem-sets/{problem_set_id} validation.badge.text validation.badge.state validation.progress_text validation.in_progress
// @api GET /api/problem-sets/{problem_set_id} import.in_progress import.progress_text import.total_bytes import.read_bytes
// @api GET /api/problem-sets/{problem_set_id} probe.status probe.progress_text probe.total probe.done probe.in_progress
// @reads-elsewhere problem_set (the notification events)
function followProblemSet(id, event, key, show, finished) {
  try {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + "/ws/notifications/");
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.event === event && data.problem_set === id) show(data);
    };
  } catch (err) { /* polling below still follows the job */ }

  async function poll() {
    if (finished()) return;
    try {
      const response = await fetch("/api/problem-sets/" + id + "?results=false",
                                   {credentials: "same-origin", headers: {Accept: "application/json"}});
      if (response.ok) show((await response.json())[key]);
    } catch (err) { /* network blip: try again */ }
    if (!finished()) window.setTimeout(poll, 2000);
  }
  window.setTimeout(poll, 2000);
}

// Problem-set page: follow a pending/running validation (websocket, with polling as the fallback)
// and reload once it has finished, so the per-problem verdicts appear without a manual refresh.
// The badge, its line and whether the validation is still under way are the server's
// (webapp/problems/services.py validation_state).
(function () {
  "use strict";
  const card = document.getElementById("validation");
  if (!card || card.dataset.inProgress !== "true") return;
  const id = Number(card.dataset.problemSet);
  // While the upload is imported the follower below has the page; it reloads when the import ends.
  const imported = document.getElementById("import");
  if (imported && imported.dataset.inProgress === "true") return;

  const badge = card.querySelector("[data-validation-status]");
  const summary = document.getElementById("validation-summary");
  let finished = false;

  // `v`: {badge: {state, text}, progress_text, in_progress, ...} from the notification or the API.
  function show(v) {
    if (finished) return;
    badge.textContent = v.badge.text;
    badge.className = "status status-" + v.badge.state;
    summary.textContent = v.progress_text;
    if (!v.in_progress) {
      finished = true;
      summary.textContent = "finished; loading the results…";
      window.location.reload();
    }
  }

  followProblemSet(id, "validation", "validation", show, () => finished);
})();

// Problem-set page of a large upload: follow its background import (lines and bytes read) and
// reload when it has ended, to show the problems (validation follows) or the errors.
(function () {
  "use strict";
  const card = document.getElementById("import");
  if (!card || card.dataset.inProgress !== "true") return;
  const id = Number(card.dataset.problemSet);
  const summary = document.getElementById("import-summary");
  const bar = document.getElementById("import-progress");
  let finished = false;

  // `state`: {in_progress, progress_text, read_bytes, total_bytes} from the notification or the API's `import`.
  function show(state) {
    if (finished) return;
    if (state.in_progress) {
      summary.textContent = state.progress_text;
      bar.max = state.total_bytes;
      bar.value = state.read_bytes;
      return;
    }
    finished = true;
    summary.textContent = "finished; loading the problems…";
    window.location.reload();
  }

  followProblemSet(id, "import", "import", show, () => finished);
})();

// Problem-set page: follow a pending/running difficulty probe (problems probed so far) and reload
// when it has ended, to show its histogram, lists and the table's pass-rate column.
(function () {
  "use strict";
  const card = document.getElementById("probe");
  if (!card || card.dataset.inProgress !== "true") return;
  const id = Number(card.dataset.problemSet);
  const badge = card.querySelector("[data-probe-status]");
  const summary = document.getElementById("probe-summary");
  const bar = document.getElementById("probe-progress");
  let finished = false;

  // `p`: {status, done, total, in_progress, progress_text} from the notification or the API's `probe`.
  function show(p) {
    if (finished || !p) return;
    badge.textContent = p.status;
    badge.className = "status status-" + p.status;
    if (p.progress_text) summary.textContent = p.progress_text;
    bar.max = p.total;
    bar.value = p.done;
    if (!p.in_progress) {
      finished = true;
      summary.textContent = "finished; loading the results…";
      window.location.reload();
    }
  }

  followProblemSet(id, "probe", "probe", show, () => finished);
})();

// The finished probe's histogram: problems per number of samples passed, one bar per possible value
// (0 of n … n of n), on a category axis, so that nothing is drawn outside pass rates 0 to 1.
(function () {
  "use strict";
  const data = document.getElementById("probe-chart");
  const el = document.getElementById("probe-histogram");
  if (!data || !el || typeof Plotly === "undefined") return;
  const chart = JSON.parse(data.textContent);
  const n = chart.samples;
  const counts = new Array(n + 1).fill(0);
  chart.rates.forEach((rate) => { counts[Math.round(rate * n)] += 1; });
  const labels = counts.map((_, k) => k + "/" + n);
  Plotly.newPlot(el, [{
    type: "bar", x: labels, y: counts, marker: {color: "#1f77b4"},
    customdata: counts.map((_, k) => Math.round(100 * k / n)),
    hovertemplate: "%{x} samples passed (pass rate %{customdata}%): %{y} problems<extra></extra>",
  }], {
    margin: {l: 50, r: 10, t: 10, b: 45}, height: 260, bargap: 0.15,
    xaxis: {type: "category", title: {text: "samples passed, of " + n + " (0/" + n + ": never solved; " + n + "/" + n + ": always)"}},
    yaxis: {title: {text: "problems"}, rangemode: "tozero", tickformat: "d"},
  }, {displaylogo: false, responsive: true});
})();
