// The workflow editor in admin: the YAML is checked as it is typed. A pause of CHECK_DELAY_MS after an edit
// posts it (with the form's CSRF token) to the admin's check view, which answers as lint_workflow does,
// {errors, warnings}; they are listed under the editor and marked in its gutter where a line is known.
// Nothing is saved. A click on a node of the graph puts the cursor on that node in the editor.
(function () {
  "use strict";
  var CHECK_DELAY_MS = 600;
  var script = document.currentScript;
  var checkUrl = script.dataset.checkUrl;
  var workflowId = script.dataset.workflow;

  function lineOfMessage(message) {
    var found = /\bline (\d+)/.exec(message);
    return found ? Number(found[1]) : null;
  }

  // The line of node `nodeId` under `nodes:` in block YAML, or null (flow style, or not there).
  function lineOfNode(lines, nodeId) {
    var start = lines.findIndex(function (line) { return /^nodes\s*:\s*(#.*)?$/.test(line); });
    if (start < 0 || !nodeId) return null;
    var indent = null;
    for (var i = start + 1; i < lines.length; i++) {
      var line = lines[i];
      if (!line.trim() || /^\s*#/.test(line)) continue;
      var own = /^(\s*)/.exec(line)[1].length;
      if (own === 0) return null;  // past the nodes mapping
      if (indent === null) indent = own;
      if (own !== indent) continue;
      var key = line.trim().replace(/\s*:.*$/, "").replace(/^(["'])(.*)\1$/, "$2");
      if (key === nodeId) return i + 1;
    }
    return null;
  }

  function nodeOfMessage(message) {
    var found = /^nodes\.([^.:\s]+)/.exec(message);
    return found ? found[1] : null;
  }

  function init() {
    var area = document.getElementById("id_yaml_text");
    if (!checkUrl || !area) return;
    var form = area.form;
    var token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
    var widget = area.previousElementSibling;
    var editor = widget && widget.editor;  // set by django_ace's widget.js, whose load handler ran first

    var pane = document.createElement("div");
    pane.className = "editor-checks";
    pane.id = "yaml-checks";
    pane.hidden = true;
    pane.setAttribute("role", "status");
    pane.setAttribute("aria-live", "polite");
    var status = document.createElement("p");
    status.className = "checks-status";
    var errors = document.createElement("ul");
    errors.className = "errors";
    var warnings = document.createElement("ul");
    warnings.className = "warnings";
    pane.append(status, errors, warnings);
    // In the editor's block: as a sibling of the block, admin's row layout would set it beside the editor.
    var block = area.closest(".django-ace-editor");
    if (block) block.append(pane); else area.after(pane);

    function text() {
      return editor ? editor.getValue() : area.value;
    }

    function gotoLine(line) {
      if (!editor || !line) return;
      editor.gotoLine(line, 0, true);
      editor.focus();
      widget.scrollIntoView({block: "nearest"});
    }

    function item(list, message, line, extra) {
      var li = document.createElement("li");
      if (line) {
        var jump = document.createElement("button");
        jump.type = "button";
        jump.className = "goto";
        jump.textContent = "line " + line;
        jump.title = "Show line " + line + " in the editor";
        jump.addEventListener("click", function () { gotoLine(line); });
        li.append(jump);
      }
      if (extra) {
        var code = document.createElement("code");
        code.textContent = extra;
        li.append(code, " ");
      }
      li.append(message);
      list.append(li);
    }

    function show(report) {
      var lines = text().split("\n");
      var marks = [];
      errors.replaceChildren();
      warnings.replaceChildren();
      report.errors.forEach(function (message) {
        var line = lineOfMessage(message) || lineOfNode(lines, nodeOfMessage(message));
        item(errors, message, line);
        if (line) marks.push({row: line - 1, column: 0, text: message, type: "error"});
      });
      report.warnings.forEach(function (warning) {
        var line = lineOfMessage(warning.message) || lineOfNode(lines, warning.state);
        item(warnings, warning.message, line, warning.code);
        if (line) marks.push({row: line - 1, column: 0, text: warning.message, type: "warning"});
      });
      if (editor) editor.session.setAnnotations(marks);
      var problems = report.errors.length, findings = report.warnings.length;
      pane.classList.toggle("has-errors", problems > 0);
      status.textContent = problems
        ? problems + (problems === 1 ? " problem" : " problems") + ": the workflow cannot be saved until "
          + (problems === 1 ? "it is" : "they are") + " fixed."
        : "No problems" + (findings ? "; " + findings + (findings === 1 ? " lint finding." : " lint findings.") : ".");
      pane.hidden = false;
    }

    function failed(message) {
      errors.replaceChildren();
      warnings.replaceChildren();
      pane.classList.remove("has-errors");
      status.textContent = "Could not check the YAML: " + message;
      pane.hidden = false;
    }

    var timer = null, pending = null;

    function check() {
      if (pending) pending.abort();
      pending = new AbortController();
      var body = new FormData();
      body.append("yaml_text", text());
      if (workflowId) {
        body.append("workflow", workflowId);
      } else {
        ["owner", "project"].forEach(function (name) {
          var field = form.elements[name];
          if (field && field.value) body.append(name, field.value);
        });
      }
      status.textContent = "Checking…";
      fetch(checkUrl, {method: "POST", body: body, headers: {"X-CSRFToken": token}, credentials: "same-origin",
                       signal: pending.signal})
        .then(function (response) {
          // Admin answers a request whose session has ended with its sign-in page.
          if (response.redirected) throw new Error("your session has ended; sign in again.");
          return response.json().then(function (report) {
            if (!response.ok) throw new Error(report.error || response.statusText);
            return report;
          });
        })
        .then(show)
        .catch(function (error) {
          if (error.name !== "AbortError") failed(error.message);
        });
    }

    function edited() {
      clearTimeout(timer);
      timer = setTimeout(check, CHECK_DELAY_MS);
    }

    if (editor) {
      editor.session.on("change", edited);
    } else {
      area.addEventListener("input", edited);
    }

    document.querySelectorAll(".run-graph a.node").forEach(function (node) {
      node.addEventListener("click", function (event) {
        var line = lineOfNode(text().split("\n"), node.dataset.node);
        if (!line) return;
        event.preventDefault();
        gotoLine(line);
      });
    });
  }

  window.addEventListener("load", init);
})();
