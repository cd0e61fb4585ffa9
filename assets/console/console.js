// Voxline console behaviours. The CSP allows no inline script, so pages ask
// for behaviour with data-* attributes and this file wires them up, on load
// and again whenever htmx swaps new content in.
(function () {
  "use strict";

  // data-copy="#selector": copies the target's text to the clipboard.
  function wireCopy(root) {
    root.querySelectorAll("[data-copy]").forEach(function (btn) {
      if (btn.dataset.wired) return;
      btn.dataset.wired = "1";
      btn.addEventListener("click", function () {
        var target = document.querySelector(btn.dataset.copy);
        if (!target) return;
        var text = target.value !== undefined ? target.value : target.textContent;
        navigator.clipboard.writeText(text.trim()).then(function () {
          btn.textContent = "Copied";
        });
      });
    });
  }

  // data-sse="/path" data-sse-target="#id": swaps each event's data (an HTML
  // fragment) into the target; an event named "done" closes the stream.
  function wireSse(root) {
    root.querySelectorAll("[data-sse]").forEach(function (el) {
      if (el.dataset.wired) return;
      el.dataset.wired = "1";
      var target = document.querySelector(el.dataset.sseTarget || "#" + el.id) || el;
      var source = new EventSource(el.dataset.sse);
      function swap(ev) {
        target.innerHTML = ev.data;
        if (window.htmx) window.htmx.process(target);
        wireAll(target);
      }
      source.addEventListener("message", swap);
      source.addEventListener("update", swap);
      source.addEventListener("done", function (ev) {
        if (ev.data) swap(ev);
        source.close();
        el.dataset.sseDone = "1";
        if (el.dataset.sseReload !== undefined) window.location.reload();
      });
    });
  }

  function wireAll(root) {
    wireCopy(root);
    wireSse(root);
    (window.voxlineConsole.wirers || []).forEach(function (f) { f(root); });
  }

  // Page families add their own wirers here (see each one's section below).
  window.voxlineConsole = { wirers: [] };
  document.addEventListener("DOMContentLoaded", function () { wireAll(document); });
  document.addEventListener("htmx:load", function (ev) { wireAll(ev.target); });
})();
