// fairlane dashboard: live fragments (over an event stream where the page offers one, else by
// polling), and confirmations. No dependencies.
(function () {
  "use strict";
  function poll(box) {
    var url = box.getAttribute("data-poll");
    var every = parseInt(box.getAttribute("data-every") || "3000", 10);
    var timer = null;
    function tick() {
      if (document.hidden) { timer = setTimeout(tick, every); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (answer) {
          // Sent to the sign-in form: the session ended (signed out, revoked, idle). Reload,
          // so the page itself goes there and comes back here once signed in again.
          if (answer.redirected) { window.location.reload(); return null; }
          if (!answer.ok) { throw new Error(String(answer.status)); }
          return answer.text();
        })
        .then(function (html) {
          if (html === null) { return; }
          box.innerHTML = html;
          box.removeAttribute("data-stale");
          var inner = box.querySelector("[data-final]");
          if (inner) { return; }  // a run that ended: nothing more to follow
          timer = setTimeout(tick, every);
        })
        .catch(function () { box.setAttribute("data-stale", "1"); timer = setTimeout(tick, every * 2); });
    }
    timer = setTimeout(tick, every);
  }
  // Follow a run over Server-Sent Events: each change fetches the fragment once. A stream that
  // fails (no EventSource, a proxy that buffers, a session that ended) falls back to polling.
  function follow(box) {
    if (!window.EventSource) { poll(box); return; }
    var url = box.getAttribute("data-poll");
    var source = new EventSource(box.getAttribute("data-events"));
    var fetching = false, again = false;
    function refresh() {
      if (fetching) { again = true; return; }
      fetching = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (answer) {
          if (answer.redirected) { window.location.reload(); return null; }
          return answer.ok ? answer.text() : null;
        })
        .then(function (html) {
          if (html !== null) { box.innerHTML = html; box.removeAttribute("data-stale"); }
          fetching = false;
          if (again) { again = false; refresh(); }
        })
        .catch(function () { fetching = false; box.setAttribute("data-stale", "1"); });
    }
    ["status", "metadata", "result"].forEach(function (name) {
      source.addEventListener(name, refresh);
    });
    source.addEventListener("end", function () { source.close(); refresh(); });
    source.onerror = function () { source.close(); poll(box); };
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(function (box) {
      if (box.hasAttribute("data-events")) { follow(box); } else { poll(box); }
    });
    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-confirm]");
      if (button && !window.confirm(button.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
})();
