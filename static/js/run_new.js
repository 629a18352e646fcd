// New-run form: presets fill every field; a switched-off section (use lora) greys out its fields.
(function () {
  "use strict";
  var form = document.getElementById("run-form");
  var presets = JSON.parse(document.getElementById("presets-data").textContent);

  function setValue(name, value) {
    var el = form.elements[name];
    if (!el) return;
    if (el.type === "checkbox") el.checked = !!value;
    else if (Array.isArray(value)) el.value = JSON.stringify(value);
    else el.value = value === null || value === undefined ? "" : value;
  }

  function syncSections() {
    Array.prototype.forEach.call(form.querySelectorAll("input[type=checkbox]"), function (box) {
      var prefix = box.name + ".";
      Array.prototype.forEach.call(form.elements, function (el) {
        if (el.name && el.name.indexOf(prefix) === 0) el.disabled = !box.checked;
      });
    });
  }

  form.querySelectorAll(".preset").forEach(function (button) {
    button.addEventListener("click", function () {
      var preset = presets.find(function (p) { return p.name === button.dataset.preset; });
      Object.keys(preset.values).forEach(function (name) { setValue(name, preset.values[name]); });
      var name = form.elements["name"];
      if (!name.value || / run$/.test(name.value)) name.value = preset.name + " run";
      form.querySelectorAll(".preset").forEach(function (b) { b.classList.toggle("primary", b === button); });
      syncSections();
    });
  });
  form.addEventListener("change", function (e) { if (e.target.type === "checkbox") syncSections(); });
  // Disabled inputs are not submitted; re-enable them so the server sees the whole config.
  form.addEventListener("submit", function () {
    Array.prototype.forEach.call(form.elements, function (el) { el.disabled = false; });
  });
  syncSections();
})();
