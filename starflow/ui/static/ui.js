// starflow ui: live updates through server-sent events, no framework.
// An element #live with data-stream (an event-stream URL) and data-partial (the
// same view without the page around it) is refreshed in place on each
// `changed` event; `end` closes the stream. Sections marked data-when="a b"
// show only while the run's status is one of those.
(function () {
  "use strict";
  var state = document.getElementById("live-state");

  function say(text, off) {
    if (!state) return;
    state.hidden = false;
    state.textContent = text;
    state.className = "live-state" + (off ? " off" : "");
  }

  function applyStatus(root) {
    var holder = root.querySelector("[data-run-status]");
    if (!holder) return;
    var status = holder.getAttribute("data-run-status");
    document.querySelectorAll("[data-when]").forEach(function (el) {
      el.hidden = el.getAttribute("data-when").split(" ").indexOf(status) < 0;
    });
  }

  function openDetails(root) {
    var open = [];
    root.querySelectorAll("details").forEach(function (d, i) { if (d.open) open.push(i); });
    return open;
  }

  function restoreDetails(root, open) {
    var all = root.querySelectorAll("details");
    open.forEach(function (i) { if (all[i]) all[i].open = true; });
  }

  function start() {
    var live = document.getElementById("live");
    applyStatus(document);
    if (!live || !live.dataset.stream || !window.EventSource) return;
    var busy = false, again = false;

    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(live.dataset.partial, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
        .then(function (html) {
          var open = openDetails(live);
          live.innerHTML = html;
          restoreDetails(live, open);
          applyStatus(document);
          live.dispatchEvent(new CustomEvent("starflow:refreshed", { bubbles: true }));
        })
        .catch(function () { say("● refresh failed", true); })
        .then(function () { busy = false; if (again) { again = false; refresh(); } });
    }

    var source = new EventSource(live.dataset.stream, { withCredentials: true });
    source.addEventListener("open", function () { say("● live"); });
    source.addEventListener("changed", refresh);
    source.addEventListener("end", function () {
      source.close();
      refresh();
      say("● ended", true);
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) say("● not live", true);
      else say("● reconnecting…", true);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
