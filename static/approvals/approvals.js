// The Copy buttons of a challenge page: shown only where the clipboard can be written, since the
// code and the call are selectable with one click without them.
(function () {
  if (!navigator.clipboard) {
    return;
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.getElementById(button.dataset.copy);
    button.hidden = false;
    button.addEventListener("click", function () {
      navigator.clipboard.writeText(source.textContent.trim()).then(function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      });
    });
  });
})();
