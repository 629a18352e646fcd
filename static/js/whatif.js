// Run page, what-if re-scoring panel (templates/runs/_whatif.html): POST /api/runs/<id>/rescore with
// other reward weights, then per step the sign flips and rank correlation, the problems whose
// ranking changes most, and one problem's candidates side by side (reward and advantage before → after).
// What it reads off the answer (tests/webapp/core/test_page_api_fields.py holds these to the API schema):
// @api POST /api/runs/{run_id}/rescore range summary.candidates summary.groups summary.sign_flips summary.rank_corr
// @api POST /api/runs/{run_id}/rescore steps[].step steps[].sign_flips steps[].rank_corr steps[].zero_variance_before steps[].zero_variance_after
// @api POST /api/runs/{run_id}/rescore problems[].problem_id problems[].rank_corr problems[].sign_flips problems[].groups
// @api POST /api/runs/{run_id}/rescore problems[].candidates[].step problems[].candidates[].index problems[].candidates[].status problems[].candidates[].reward_before problems[].candidates[].reward_after problems[].candidates[].advantage_before problems[].candidates[].advantage_after problems[].candidates[].sign_flip problems[].candidates[].rank_before problems[].candidates[].rank_after
// @api POST /api/runs/{run_id}/rescore problems[].candidates[].turns[].reward_before problems[].candidates[].turns[].reward_after problems[].candidates[].turns[].return_before problems[].candidates[].turns[].return_after problems[].candidates[].turns[].advantage_before problems[].candidates[].turns[].advantage_after problems[].candidates[].turns[].sign_flip
(function () {
  "use strict";
  var panel = document.getElementById("whatif");
  if (!panel) return;
  var runId = panel.dataset.run;
  var form = document.getElementById("whatif-form");
  var status = document.getElementById("whatif-status");
  var startLink = document.getElementById("whatif-start");
  var weightInputs = Array.from(form.querySelectorAll("input[data-run-value]"));
  var answer = null, openProblem = null;

  function pct(x) { return (100 * x).toFixed(1) + "%"; }
  function num(x) { return x.toFixed(3); }
  function cell(text, className, title) {
    var td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    if (title) td.title = title;
    return td;
  }

  function weights() {
    var out = {};
    weightInputs.forEach(function (el) { out[el.name] = el.value === "" ? null : Number(el.value); });
    return out;
  }

  // "Start a run with these weights": the new-run form cloned from this run, the weights as query params.
  function updateStartLink() {
    var params = new URLSearchParams({clone: runId});
    weightInputs.forEach(function (el) {
      if (el.value !== "" && Number(el.value) !== Number(el.dataset.runValue)) params.set("reward.weights." + el.name, el.value);
    });
    startLink.href = "/runs/new?" + params.toString();
  }
  form.addEventListener("input", updateStartLink);
  document.getElementById("whatif-reset").addEventListener("click", function () {
    weightInputs.forEach(function (el) { el.value = el.dataset.runValue; });
    updateStartLink();
  });

  // The stored range follows the run: a live step's candidates (its `problem` events, stored before they
  // are sent) extend it, and the empty fields' placeholders say what an empty field asks for now.
  var storedFrom = panel.dataset.storedFrom === "" ? null : Number(panel.dataset.storedFrom);
  var storedTo = panel.dataset.storedTo === "" ? null : Number(panel.dataset.storedTo);
  var defaultSteps = Number(panel.dataset.defaultSteps) || 10;
  function showStored() {
    if (storedTo === null) return;
    document.getElementById("whatif-stored").textContent = "candidates stored for steps " + storedFrom + "–" + storedTo;
    form.elements["to"].placeholder = storedTo;
    form.elements["from"].placeholder = Math.max(storedFrom, storedTo - defaultSteps + 1);
  }
  document.addEventListener("crucible:run-event", function (e) {
    var ev = e.detail;
    if (ev.event !== "problem" || typeof ev.step !== "number" || !(ev.candidates || []).length) return;
    if (storedTo !== null && ev.step <= storedTo) return;
    if (storedFrom === null) storedFrom = ev.step;
    storedTo = ev.step;
    showStored();
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var body = {weights: weights()};
    var from = form.elements["from"].value, to = form.elements["to"].value;
    if (from !== "" || to !== "") {
      // one end left empty: ten steps from the other (the server clamps to the stored steps)
      body.steps = [from === "" ? Math.max(0, Number(to) - 9) : Number(from), to === "" ? Number(from) + 9 : Number(to)];
    }
    // The first re-scoring of a server process loads PyTorch (training's advantage functions): seconds.
    status.textContent = answer ? "re-scoring…" : "re-scoring… (a server's first re-scoring loads PyTorch: a few seconds)";
    var started = performance.now();
    fetch("/api/runs/" + runId + "/rescore", {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRFToken": form.elements["csrfmiddlewaretoken"].value},
      body: JSON.stringify(body),
    }).then(function (r) {
      return r.json().then(function (data) {
        if (!r.ok) throw new Error(data.detail || ("HTTP " + r.status));
        return data;
      });
    }).then(function (data) {
      answer = data;
      answer.asked = body.steps ? "steps " + body.steps[0] + "–" + body.steps[1] : "the newest " + defaultSteps + " stored steps";
      if (data.range && (storedTo === null || data.range[1] > storedTo)) {  // the server had newer steps
        storedFrom = storedFrom === null ? data.range[0] : storedFrom;
        storedTo = data.range[1];
        showStored();
      }
      draw(Math.round(performance.now() - started));
    }).catch(function (err) {
      status.textContent = "Could not re-score: " + err.message;
      status.className = "small notice error";
    });
  });

  function draw(ms) {
    status.className = "small";
    if (!answer.range) {
      status.textContent = "No candidates are stored yet: re-scoring needs at least one step.";
      document.getElementById("whatif-results").hidden = true;
      return;
    }
    var s = answer.summary;
    // The range answered, as the server clamped it, and what was asked.
    status.textContent = "Steps " + answer.range[0] + "–" + answer.range[1] + " (asked: " + answer.asked + "): " +
      s.candidates + " candidates in " +
      s.groups + " groups; " + pct(s.sign_flips) + " change the sign of their advantage, mean rank correlation " +
      num(s.rank_corr) + " (" + ms + " ms).";
    var steps = document.getElementById("whatif-steps");
    steps.replaceChildren.apply(steps, answer.steps.map(function (st) {
      var tr = document.createElement("tr");
      tr.dataset.step = st.step;
      tr.append(cell(String(st.step)), cell(pct(st.sign_flips), st.sign_flips > 0 ? "whatif-flip" : ""),
                cell(num(st.rank_corr)), cell(st.zero_variance_before + " → " + st.zero_variance_after));
      return tr;
    }));
    var problems = document.getElementById("whatif-problems");
    problems.replaceChildren.apply(problems, answer.problems.map(function (p) {
      var tr = document.createElement("tr");
      tr.className = "clickable";
      tr.dataset.problem = p.problem_id;
      tr.title = "show its candidates side by side";
      tr.append(cell(p.problem_id), cell(num(p.rank_corr)), cell(pct(p.sign_flips), p.sign_flips > 0 ? "whatif-flip" : ""),
                cell(String(p.groups)));
      return tr;
    }));
    document.getElementById("whatif-results").hidden = false;
    var still = answer.problems.find(function (p) { return p.problem_id === openProblem; });
    if (still) showProblem(still); else document.getElementById("whatif-problem").hidden = true;
  }

  document.getElementById("whatif-problems").addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-problem]");
    if (!tr) return;
    showProblem(answer.problems.find(function (p) { return p.problem_id === tr.dataset.problem; }));
  });

  function showProblem(problem) {
    openProblem = problem.problem_id;
    document.querySelectorAll("#whatif-problems tr.selected").forEach(function (tr) { tr.classList.remove("selected"); });
    var row = document.querySelector('#whatif-problems tr[data-problem="' + CSS.escape(openProblem) + '"]');
    if (row) row.classList.add("selected");
    document.getElementById("whatif-problem-title").textContent = openProblem + " — rank correlation " +
      num(problem.rank_corr) + ", " + pct(problem.sign_flips) + " sign flips";
    var body = document.getElementById("whatif-candidates");
    body.replaceChildren.apply(body, problem.candidates.map(function (c) {
      var tr = document.createElement("tr");
      tr.dataset.step = c.step; tr.dataset.index = c.index;
      var dr = c.reward_after - c.reward_before;
      var flipped = c.sign_flip;
      var open = document.createElement("button");
      open.type = "button"; open.className = "small whatif-open"; open.textContent = "code";
      tr.append(cell(String(c.step)), cell("#" + c.index), cell(c.status || ""),
                cell(num(c.reward_before) + " → " + num(c.reward_after), dr > 1e-9 ? "whatif-up" : dr < -1e-9 ? "whatif-down" : ""),
                cell(num(c.advantage_before) + " → " + num(c.advantage_after), flipped ? "whatif-flip" : "",
                     flipped ? "the advantage changes sign" : ""),
                cell(c.rank_before + " → " + c.rank_after));  // ranks in its group, the server's (1 = best)
      var td = document.createElement("td"); td.append(open); tr.append(td);
      if (c.turns) turnLines(tr, c.turns);
      return tr;
    }));
    document.getElementById("whatif-problem").hidden = false;
  }

  // A multi-turn candidate: under its reward and advantage, each turn's own reward and the advantage its
  // tokens get (with discounted credit, one per turn, from the turn's return).
  function turnLines(tr, turns) {
    var cells = tr.querySelectorAll("td");
    turns.forEach(function (t, i) {
      var reward = document.createElement("div"), adv = document.createElement("div");
      reward.className = adv.className = "muted small whatif-turn";
      reward.textContent = "turn " + (i + 1) + ": " + num(t.reward_before) + " → " + num(t.reward_after);
      reward.title = "the turn's own reward; its return " + num(t.return_before) + " → " + num(t.return_after);
      adv.textContent = "turn " + (i + 1) + ": " + num(t.advantage_before) + " → " + num(t.advantage_after);
      if (t.sign_flip) adv.classList.add("whatif-flip");
      cells[3].append(reward); cells[4].append(adv);
    });
  }

  // A candidate's code and tests: the run page's candidates fragment for its step, this candidate only.
  document.getElementById("whatif-candidates").addEventListener("click", function (e) {
    var button = e.target.closest("button.whatif-open");
    if (!button) return;
    var tr = button.closest("tr");
    var next = tr.nextElementSibling;
    if (next && next.classList.contains("whatif-code")) { next.remove(); return; }
    var url = "/runs/" + runId + "/problems/" + encodeURIComponent(openProblem) + "/candidates?step=" + tr.dataset.step;
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var box = document.createElement("div");
      box.innerHTML = html;  // server-rendered, escaped by the template
      var details = box.querySelector('details.candidate[data-index="' + tr.dataset.index + '"]');
      var row = document.createElement("tr"), td = document.createElement("td");
      row.className = "whatif-code"; td.colSpan = 7;
      if (details) { details.open = true; td.append(details); } else td.textContent = "This candidate is no longer stored.";
      row.append(td);
      tr.after(row);
    }).catch(function (err) { button.textContent = "code (" + err.message + ")"; });
  });

  updateStartLink();
})();
