// fairlane dashboard: live fragments by polling, and confirmations. No dependencies.
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
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-poll]").forEach(poll);
    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-confirm]");
      if (button && !window.confirm(button.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
})();
