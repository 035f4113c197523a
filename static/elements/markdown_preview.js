// The element editor in admin: a Preview button under each Markdown editor. The server renders the text
// (POST, with the form's CSRF token) as the console shows it; nothing is saved.
(function () {
  "use strict";
  var url = document.currentScript.dataset.previewUrl;
  var form = document.querySelector("#content-main form");
  if (!url || !form) return;
  var token = form.querySelector("input[name=csrfmiddlewaretoken]").value;

  form.querySelectorAll("textarea.code-editor-markdown").forEach(function (area) {
    var row = document.createElement("div");
    row.className = "markdown-preview-row";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "button";
    button.textContent = "Preview";
    button.setAttribute("aria-controls", area.id + "-preview");
    var pane = document.createElement("div");
    pane.className = "docs-preview";
    pane.id = area.id + "-preview";
    pane.hidden = true;
    pane.setAttribute("aria-live", "polite");
    row.append(button, pane);
    // In the editor's block: as a sibling of the block, admin's row layout would set it beside the editor.
    var block = area.closest(".django-ace-editor");
    if (block) block.append(row); else area.after(row);

    button.addEventListener("click", function () {
      var body = new FormData();
      body.append("markdown", area.value);
      button.disabled = true;
      fetch(url, {method: "POST", body: body, headers: {"X-CSRFToken": token}, credentials: "same-origin"})
        .then(function (response) {
          // Admin answers a request whose session has ended with its sign-in page.
          if (response.redirected) throw new Error("your session has ended; sign in again.");
          return response.text().then(function (text) {
            if (!response.ok) throw new Error(text || response.statusText);
            return text;
          });
        })
        .then(function (html) {
          // The server's renderer shows raw HTML in the Markdown as text and drops script links.
          pane.innerHTML = html;
        })
        .catch(function (error) {
          pane.textContent = "Could not preview: " + error.message;
        })
        .finally(function () {
          pane.hidden = false;
          button.disabled = false;
          button.textContent = "Refresh preview";
        });
    });
  });
})();
