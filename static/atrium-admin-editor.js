// The admin's code editors (accounts.admin.CodeEditor). This runs after Ace loads and before django_ace's
// widget.js sets the editors up, on the window's load.
(function () {
  "use strict";
  // widget.js sets a mode before it turns the worker off, and the mode would start its worker first, from a
  // blob: URL the Content-Security-Policy refuses: no session starts with one.
  ace.config.setDefaultValue("session", "useWorker", false);

  // The editors follow admin's theme: its toggle sets data-theme on <html> (light, dark, or auto for the
  // system's), so a light editor never glares from a dark page.
  var DARK = "ace/theme/tomorrow_night", LIGHT = "ace/theme/textmate";
  var systemDark = window.matchMedia("(prefers-color-scheme: dark)");

  function theme() {
    var chosen = document.documentElement.dataset.theme;
    return chosen === "dark" || (chosen !== "light" && systemDark.matches) ? DARK : LIGHT;
  }

  function restyle() {
    document.querySelectorAll(".django-ace-widget").forEach(function (widget) {
      if (widget.editor) widget.editor.setTheme(theme());
    });
  }

  ace.config.setDefaultValue("renderer", "theme", theme());
  new MutationObserver(restyle).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
  systemDark.addEventListener("change", restyle);
})();
