// Foldable sections (<details class="fold" data-fold="KEY">): each browser remembers the ones it
// folded (localStorage "crucible.folded": {KEY: true when folded}); a section never toggled keeps
// the page's default.
(function () {
  "use strict";
  var STORE = "crucible.folded";
  function saved() {
    try { return JSON.parse(localStorage.getItem(STORE) || "{}") || {}; } catch (e) { return {}; }
  }
  var folded = saved();
  document.querySelectorAll("details.fold[data-fold]").forEach(function (section) {
    var key = section.dataset.fold;
    if (Object.prototype.hasOwnProperty.call(folded, key)) section.open = !folded[key];
    section.addEventListener("toggle", function () {
      var now = saved();  // another tab may have folded other sections meanwhile
      now[key] = !section.open;
      try { localStorage.setItem(STORE, JSON.stringify(now)); } catch (e) { /* private mode: not remembered */ }
    });
  });
})();
