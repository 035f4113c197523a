// Keeps a run page current: every 2 s it asks state.json for the run's version and, when that
// changed, re-reads the page and swaps the run in (keeping open <details>). It stops once the
// run has ended. No libraries.
(function () {
  "use strict";
  var INTERVAL_MS = 2000;

  function live() { return document.getElementById("run-live"); }

  function openDetails(root) {
    return Array.prototype.map.call(root.querySelectorAll("details[open]"), function (el) {
      var holder = el.closest("[id]");
      return (holder ? holder.id : "") + "|" + el.querySelector("summary").textContent;
    });
  }

  function reopen(root, keys) {
    root.querySelectorAll("details").forEach(function (el) {
      var holder = el.closest("[id]");
      if (keys.indexOf((holder ? holder.id : "") + "|" + el.querySelector("summary").textContent) !== -1) {
        el.open = true;
      }
    });
  }

  function announce(state) {
    var region = document.getElementById("run-announce");
    if (region) {
      region.textContent = "The run is " + state.status + (state.terminal ? "." : ", at " + state.currentNode + ".");
    }
  }

  function swap(html, state) {
    var page = new DOMParser().parseFromString(html, "text/html");
    var fresh = page.getElementById("run-live");
    var current = live();
    if (!fresh || !current) { return false; }
    var keep = openDetails(current);
    current.replaceWith(fresh);
    reopen(fresh, keep);
    if (page.title) { document.title = page.title; }
    announce(state);
    return true;
  }

  function poll() {
    var root = live();
    if (!root || root.dataset.terminal === "true") { return; }
    fetch(root.dataset.stateUrl, {cache: "no-store", credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (state) {
        if (!state || state.version === root.dataset.version) { return null; }
        return fetch(window.location.href, {cache: "no-store", credentials: "same-origin"})
          .then(function (response) { return response.ok ? response.text() : null; })
          .then(function (html) { if (html) { swap(html, state); } });
      })
      .catch(function () { /* a dropped request: the next tick tries again */ })
      .then(function () {
        var now = live();
        if (now && now.dataset.terminal !== "true") { window.setTimeout(poll, INTERVAL_MS); }
      });
  }

  window.setTimeout(poll, INTERVAL_MS);
})();
