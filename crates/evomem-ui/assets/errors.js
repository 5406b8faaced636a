// The page's error collector, loaded before app.js (a file of its own: the
// Content-Security-Policy allows no inline script). Every script error,
// unhandled rejection, console.error and Content-Security-Policy violation
// is collected in window.__evomemErrors; the browser tests fail when it is
// not empty.
"use strict";
window.__evomemErrors = [];
window.addEventListener("error", function (e) {
  window.__evomemErrors.push(String(e.message) + " at " + e.filename + ":" + e.lineno + ":" + e.colno);
});
window.addEventListener("unhandledrejection", function (e) {
  var r = e.reason;
  window.__evomemErrors.push("unhandled rejection: " + (r && r.message ? r.message : String(r)));
});
document.addEventListener("securitypolicyviolation", function (e) {
  window.__evomemErrors.push("Content-Security-Policy violation: " + e.violatedDirective +
    " blocked " + (e.blockedURI || "inline") + (e.sample ? " (" + e.sample + ")" : "") +
    " at " + e.sourceFile + ":" + e.lineNumber);
});
(function () {
  var original = console.error;
  console.error = function () {
    window.__evomemErrors.push(Array.prototype.map.call(arguments, String).join(" "));
    original.apply(console, arguments);
  };
})();
