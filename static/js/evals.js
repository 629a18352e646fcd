// The evaluation pages: while an evaluation is under way its page (and the comparison table's rows)
// follow it from the JSON API, so progress and the numbers appear without a manual refresh. The detail
// page swaps in its summary and problems table as each problem is evaluated (no reload: the page keeps its
// scroll and whatever the user is reading), and once more when the evaluation ends.
// @api GET /api/evals/{evaluation_id} in_progress done progress_text
// @api GET /api/evals [].id [].status [].done [].total
(function () {
  "use strict";
  var summary = document.getElementById("eval-summary");
  var pendingRows = document.querySelectorAll('.evals-table tr[data-status="pending"], .evals-table tr[data-status="running"], .evals-table tr[data-status="cancelling"]');
  var SWAPPED = ["eval-head", "eval-summary", "eval-problems"];
  if (summary && summary.dataset.inProgress === "1") {
    var id = summary.dataset.id;
    var done = Number(summary.dataset.done);
    var swap = function () {  // this page as the server renders it now: its changing parts, in place
      return fetch(window.location.href, {credentials: "same-origin"}).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      }).then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        SWAPPED.forEach(function (part) {
          var now = document.getElementById(part), next = fresh.getElementById(part);
          if (now && next) now.replaceWith(document.importNode(next, true));
        });
      });
    };
    var poll = function () {
      fetch("/api/evals/" + id, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (e) {
        if (e.done !== done || !e.in_progress) {
          return swap().then(function () {
            done = e.done;
            if (e.in_progress) setTimeout(poll, 2000);
          });
        }
        var progress = document.getElementById("eval-progress");
        if (progress) progress.textContent = e.progress_text;
        setTimeout(poll, 2000);
      }).catch(function () { setTimeout(poll, 5000); });
    };
    setTimeout(poll, 2000);
  } else if (pendingRows.length) {
    var check = function () {
      fetch("/api/evals", {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (list) {
        var byId = {};
        list.forEach(function (e) { byId[e.id] = e; });
        var changed = false;
        pendingRows.forEach(function (row) {
          var e = byId[row.dataset.id];
          if (e && e.status !== row.dataset.status) changed = true;
          else if (e) row.querySelector(".eval-status").textContent = e.status + " " + e.done + "/" + e.total;
        });
        if (changed) window.location.reload(); else setTimeout(check, 3000);
      }).catch(function () { setTimeout(check, 5000); });
    };
    setTimeout(check, 3000);
  }
})();
