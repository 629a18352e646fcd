// New-run form: presets fill every field, and move off a problem set they cannot use well (as the
// server judges it) to the newest one they can; a switched-off section (use lora) greys out its
// fields; the sticky launch bar says what differs from the chosen preset; out-of-range numbers are
// refused here, with the server's wording, before the form is sent; the error banner links each bad field;
// sampling.turns > 1 without chat prompts is refused as soon as either field changes, in the server's words.
(function () {
  "use strict";
  var form = document.getElementById("run-form");
  var presets = JSON.parse(document.getElementById("presets-data").textContent);
  var current = presets.find(function (p) { return p.name === form.dataset.preset; }) || presets[0];

  function setValue(name, value) {
    var el = form.elements[name];
    if (!el) return;
    if (el.type === "checkbox") el.checked = !!value;
    else if (Array.isArray(value)) el.value = JSON.stringify(value);
    else el.value = value === null || value === undefined ? "" : value;
  }

  // The value as the form would send it, in the preset's terms (so 0.2 and "0.20" are the same).
  function formValue(el) {
    if (el.type === "checkbox") return el.checked;
    if (el.type === "number") return el.value === "" ? null : Number(el.value);
    return el.value;
  }

  function presetValue(value) {
    if (Array.isArray(value)) return JSON.stringify(value);
    return value === undefined ? null : value;
  }

  function disabledBySection(name) {
    return Array.prototype.some.call(form.querySelectorAll("input[type=checkbox]"), function (box) {
      return !box.checked && name.indexOf(box.name + ".") === 0;
    });
  }

  function showChanges() {
    var changed = [];
    Object.keys(current.values).forEach(function (name) {
      var el = form.elements[name];
      if (!el || disabledBySection(name)) return;
      var now = formValue(el), was = presetValue(current.values[name]);
      if (el.type === "number" && was !== null) was = Number(was);
      if (now !== was && !(now === "" && was === null)) changed.push(name + " " + String(was) + " → " + String(now));
    });
    var el = document.getElementById("preset-changes");
    el.textContent = changed.length ? "changed from " + current.title + ": " + changed.join(", ")
      : "preset " + current.title + ", unchanged";
    el.title = el.textContent;
    el.dataset.changed = changed.length;
  }

  // What each set lacks, as the server says it (webapp/runs/forms.py set_warnings): the page came with
  // the answers at its own and the presets' problems_per_step; another value is asked of the server
  // (debounced) and kept. `issues`: problems_per_step ("" when not a whole number) -> {set id: [text]}.
  var facts = JSON.parse(document.getElementById("sets-data").textContent);
  var issuesAt = facts.issues, asking = null;
  function perStep() {
    var n = form.elements["sampling.problems_per_step"].value.trim();
    return /^[0-9]+$/.test(n) && Number(n) > 0 ? String(Number(n)) : "";
  }
  function known(n) { return Object.prototype.hasOwnProperty.call(issuesAt, n); }
  function setIssues(setId, n) { return (issuesAt[n] || {})[setId] || []; }
  // `then` runs once the issues at the form's problems_per_step are known (at once when they are).
  function withIssues(then) {
    var n = perStep();
    if (known(n)) { then(); return; }
    clearTimeout(asking);
    asking = setTimeout(function () {
      fetch("/runs/new/set-issues?problems_per_step=" + encodeURIComponent(n), {credentials: "same-origin"})
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (data) { issuesAt[n] = data.sets; if (perStep() === n) then(); })
        .catch(function () { /* the bar keeps what it says; Launch asks the server again */ });
    }, 250);
  }

  function showSetIssues() {
    withIssues(function () {
      var issues = setIssues(form.elements["problem_set"].value, perStep());
      var el = document.getElementById("set-issues");
      el.textContent = issues.length ? "⚠ " + issues.join("; ") : "";
      el.hidden = !issues.length;
    });
  }

  // An engine this server cannot start (webapp/runs/forms.py marks it in data-unavailable, its reason under
  // the field, far down in Sampling) is named in the launch bar as soon as it is chosen, by a preset or by hand.
  function showEngineIssue() {
    var select = form.elements["sampling.engine"], el = document.getElementById("engine-issue");
    if (!select || !el) return;
    var missing = (select.dataset.unavailable || "").split(" ").indexOf(select.value) >= 0;
    el.textContent = missing ? "⚠ engine " + select.value + " is not installed here" : "";
    el.hidden = !missing;
  }

  // sampling.turns > 1 needs prompt_style chat (a repair turn is a chat message): the server's refusal, in its
  // words (training/config.py TURNS_NEED_CHAT, carried by the field's data-needs-chat), under the turns field and
  // in the launch bar as soon as either field changes. -> the message, or null.
  function turnsError() {
    var turns = form.elements["sampling.turns"], style = form.elements["sampling.prompt_style"];
    if (!turns || !style || !turns.dataset.needsChat) return null;
    var n = Number(turns.value);
    if (turns.value === "" || !Number.isInteger(n) || n <= 1 || style.value === "chat") return null;
    return turns.dataset.needsChat.replace("{turns}", String(n)).replace("{prompt_style}", style.value);
  }
  function showTurnsIssue() {
    var turns = form.elements["sampling.turns"], link = document.getElementById("turns-issue");
    if (!turns) return null;
    var field = turns.closest(".field"), error = turnsError();
    var old = field.querySelector(".errorlist.turns-client");
    if (old) old.remove();
    var server = field.querySelector(".errorlist:not(.client):not(.turns-client)");  // after a refused Launch
    if (error && !(server && server.textContent.indexOf(error) >= 0)) {
      var list = document.createElement("ul"), li = document.createElement("li");
      list.className = "errorlist turns-client";
      li.textContent = error;
      list.appendChild(li);
      turns.closest("label").after(list);
    }
    if (error) {
      field.classList.add("has-error");
    } else if (!field.querySelector(".errorlist")) {
      field.classList.remove("has-error");
    }
    if (link) {
      link.textContent = error ? "⚠ sampling.turns " + turns.value + " needs prompt_style chat" : "";
      link.hidden = !error;
    }
    return error;
  }

  // After a preset: a set it cannot use well gives way to the newest set it can (the dropdown lists the
  // newest first), as the server picks the first set it offers; with none better the choice stays.
  function pickUsableSet() {
    var select = form.elements["problem_set"], note = document.getElementById("set-switched"), n = perStep();
    var issues = select.value ? setIssues(select.value, n) : ["no set chosen"];
    if (!issues.length) return;
    var usable = Array.prototype.find.call(select.options, function (o) {
      return o.value && facts.names[o.value] !== undefined && !setIssues(o.value, n).length;
    });
    if (!usable) return;
    var was = facts.names[select.value];
    select.value = usable.value;
    note.textContent = "Problem set changed to “" + facts.names[usable.value] + "” for " + current.title +
      (was !== undefined ? ": “" + was + "” has " + issues.join("; ") : "") + ".";
    note.hidden = false;
  }

  function syncSections() {
    Array.prototype.forEach.call(form.querySelectorAll("input[type=checkbox]"), function (box) {
      var prefix = box.name + ".";
      Array.prototype.forEach.call(form.elements, function (el) {
        if (el.name && el.name.indexOf(prefix) === 0) el.disabled = !box.checked;
      });
    });
  }

  // The same check and message as the server's bounds validator (webapp/runs/forms.py).
  function boundsError(el) {
    if (el.type !== "number" || el.disabled || el.value === "") return null;
    var v = Number(el.value), parts = [], low = false, high = false;
    if (el.min !== "") {
      var exMin = el.dataset.exclusiveMin === "true";
      parts.push((exMin ? "> " : ">= ") + el.min);
      low = exMin ? v <= Number(el.min) : v < Number(el.min);
    }
    if (el.max !== "") {
      var exMax = el.dataset.exclusiveMax === "true";
      parts.push((exMax ? "< " : "<= ") + el.max);
      high = exMax ? v >= Number(el.max) : v > Number(el.max);
    }
    if (el.step !== "any" && !Number.isInteger(v)) return "must be a whole number; got " + el.value;
    if (!low && !high) return null;
    var why = low && el.dataset.belowMinimum ? ": " + el.dataset.belowMinimum : "";
    return "must be " + parts.join(" and ") + "; got " + el.value + why;
  }

  function markBounds(el) {
    var field = el.closest(".field");
    if (!field) return null;
    var error = boundsError(el);
    var list = field.querySelector(".errorlist.client");
    if (list) list.remove();
    field.classList.toggle("has-error", !!error);
    if (error) {
      list = document.createElement("ul");
      list.className = "errorlist client";
      var li = document.createElement("li");
      li.textContent = error;
      list.appendChild(li);
      el.closest("label").after(list);
    }
    return error;
  }

  form.querySelectorAll(".preset").forEach(function (button) {
    button.addEventListener("click", function () {
      current = presets.find(function (p) { return p.name === button.dataset.preset; });
      form.elements["preset"].value = current.name;
      Object.keys(current.values).forEach(function (name) { setValue(name, current.values[name]); });
      var name = form.elements["name"];
      if (!name.value || / run$/.test(name.value)) name.value = current.name + " run";
      form.querySelectorAll(".preset").forEach(function (b) { b.classList.toggle("primary", b === button); });
      syncSections();
      form.querySelectorAll("input[type=number]").forEach(markBounds);
      withIssues(function () { pickUsableSet(); showChanges(); showSetIssues(); });
      showChanges();
      showEngineIssue();
      showTurnsIssue();
    });
  });
  form.addEventListener("change", function (e) {
    if (e.target.name === "problem_set") document.getElementById("set-switched").hidden = true;  // the user's own pick
    if (e.target.type === "checkbox") syncSections();
    if (e.target.type === "number") markBounds(e.target);
    showChanges();
  });
  form.addEventListener("input", function () { showChanges(); showSetIssues(); });
  form.addEventListener("change", showSetIssues);
  form.addEventListener("change", showEngineIssue);
  form.addEventListener("change", showTurnsIssue);  // after the bounds check, which resets the field's marks
  form.addEventListener("input", function (e) {
    if (e.target.name === "sampling.turns" || e.target.name === "sampling.prompt_style") showTurnsIssue();
  });
  form.addEventListener("submit", function (e) {
    var bad = Array.prototype.filter.call(form.querySelectorAll("input[type=number]"), markBounds);
    if (bad.length) {
      e.preventDefault();
      bad[0].focus();
      return;
    }
    if (showTurnsIssue()) {
      e.preventDefault();
      form.elements["sampling.turns"].focus();
      return;
    }
    // Disabled inputs are not submitted; re-enable them so the server sees the whole config.
    Array.prototype.forEach.call(form.elements, function (el) { el.disabled = false; });
  });
  // The error banner's links bring their field into the middle of the view (the sticky launch bar would
  // hide one scrolled to the bottom) and put the cursor in it.
  document.querySelectorAll("#form-errors .field-link, #engine-issue, #turns-issue").forEach(function (link) {
    link.addEventListener("click", function (e) {
      var el = document.getElementById(link.getAttribute("href").slice(1));
      if (!el) return;
      e.preventDefault();
      el.scrollIntoView({block: "center"});
      el.focus({preventScroll: true});
    });
  });
  syncSections();
  showChanges();
  showSetIssues();
  showEngineIssue();
  showTurnsIssue();
})();
