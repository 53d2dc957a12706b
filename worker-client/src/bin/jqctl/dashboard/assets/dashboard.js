// jq dashboard: refreshes the page's live part every 2 s while the page is visible, and asks
// before bulk actions. No inline script anywhere (the Content-Security-Policy forbids it).
(function () {
  "use strict";
  var PERIOD = 2000;
  var live = document.querySelector("[data-live]");
  var timer = null;

  function refresh() {
    timer = null;
    if (document.hidden || !live) return;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        live.removeAttribute("data-stale");
        document.dispatchEvent(new CustomEvent("jq:refreshed"));
      })
      .catch(function () {
        live.setAttribute("data-stale", "1");
      })
      .then(schedule);
  }

  function schedule() {
    if (timer === null && !document.hidden) timer = window.setTimeout(refresh, PERIOD);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (timer !== null) window.clearTimeout(timer);
      timer = null;
    } else {
      refresh();
    }
  });

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  });

  schedule();
})();
