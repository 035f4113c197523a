// The workflow editor in admin: in the YAML box, Tab indents by two spaces instead of leaving the field.
(function () {
  "use strict";
  document.querySelectorAll("textarea.workflow-yaml").forEach(function (area) {
    area.addEventListener("keydown", function (event) {
      if (event.key !== "Tab" || event.shiftKey || event.ctrlKey || event.altKey || event.metaKey) return;
      event.preventDefault();
      area.setRangeText("  ", area.selectionStart, area.selectionEnd, "end");
    });
  });
})();
