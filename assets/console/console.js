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

// ---- Calls pages (helper "calls"): bar widths, charts, seek-on-click ----
(function () {
  "use strict";

  // data-width="42.5": the element's width in percent (the CSP forbids
  // style attributes, so widths that are data are set from here).
  function wireWidths(root) {
    root.querySelectorAll("[data-width]").forEach(function (el) {
      var value = parseFloat(el.dataset.width);
      if (!isNaN(value)) el.style.width = Math.max(0, Math.min(100, value)) + "%";
    });
  }

  // data-chart="line|bars" data-series='{"x":[unix s…],"series":[{"label","values"}]}':
  // a uPlot chart of the series over days.
  var COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea"];
  function wireCharts(root) {
    if (typeof window.uPlot === "undefined") return;
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.drawn) return;
      var data;
      try { data = JSON.parse(el.dataset.series); } catch (e) { return; }
      el.dataset.drawn = "1";
      var bars = el.dataset.chart === "bars" && window.uPlot.paths && window.uPlot.paths.bars;
      var series = [{}];
      var columns = [data.x];
      data.series.forEach(function (s, i) {
        var color = COLORS[i % COLORS.length];
        var style = { label: s.label, stroke: color, width: 2, spanGaps: true };
        if (bars) {
          style.paths = window.uPlot.paths.bars({ size: [0.7 / data.series.length, 40], align: 0 });
          style.fill = color + "99";
        }
        series.push(style);
        columns.push(s.values);
      });
      var width = function () { return Math.max(240, el.clientWidth || 320); };
      var plot = new window.uPlot({
        width: width(), height: 220, series: series,
        scales: { x: { time: true } }, axes: [{}, { size: 56 }]
      }, columns, el);
      if (typeof ResizeObserver !== "undefined") {
        new ResizeObserver(function () { plot.setSize({ width: width(), height: 220 }); }).observe(el);
      }
    });
  }

  // data-seek="12.5" data-player="#player": clicking plays the player from 12.5 s.
  function wireSeek(root) {
    root.querySelectorAll("[data-seek]").forEach(function (btn) {
      if (btn.dataset.seekWired) return;
      btn.dataset.seekWired = "1";
      btn.addEventListener("click", function () {
        var player = document.querySelector(btn.dataset.player || "audio");
        var at = parseFloat(btn.dataset.seek);
        if (!player || isNaN(at)) return;
        player.currentTime = at;
        var playing = player.play();
        if (playing && playing.catch) playing.catch(function () {});
      });
    });
  }

  window.voxlineConsole.wirers.push(wireWidths, wireCharts, wireSeek);
})();

// ---- Batches (helper "batches"): a refused request answers 409 or 422 with
// the fragment to show (a flash message, or the form's fields with the
// reasons beside them). htmx swaps only 2xx answers by default, so requests
// made from inside a [data-show-refusals] element swap these too.
(function () {
  "use strict";
  document.addEventListener("htmx:beforeSwap", function (ev) {
    var status = ev.detail.xhr && ev.detail.xhr.status;
    if (status !== 409 && status !== 422) return;
    var elt = (ev.detail.requestConfig && ev.detail.requestConfig.elt) || ev.target;
    if (elt && elt.closest && elt.closest("[data-show-refusals]")) {
      ev.detail.shouldSwap = true;
      ev.detail.isError = false;
    }
  });
})();
