// What every memlens page (view, diff, live) shares: the token, requests, number
// formats, element building and the one test of what is library code. Loaded before
// the page's own script; data only ever reaches the page as textContent.
"use strict";
window.memlensUi = (function () {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const api = (path, params) => {
    const q = new URLSearchParams(Object.assign({ token: TOKEN }, params || {}));
    return fetch(path + "?" + q.toString()).then((r) => {
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r;
    });
  };
  const fmt = (n) => (n >= 1e9 ? (n / 1e9).toFixed(2) + "G" : n >= 1e6 ? (n / 1e6).toFixed(2) + "M" : n >= 1e4 ? (n / 1e3).toFixed(1) + "k" : String(n));
  const base = (f) => (f || "").split("/").pop();
  const el = (tag, className, text) => {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  // Toolchain and library code, not the program's own: system headers and libraries,
  // the Rust standard library and toolchains, library crates (memlens's own runtime
  // among them in a memlens-built program), or no source file at all.
  const isLibrary = (f) =>
    !f || /^\/usr\/|^\/rustc\/|^\/rust\/|\/\.rustup\/toolchains\/|\/include\/c\+\+\/|\/\.cargo\/(registry|git)\/|\/rustlib\//.test(f);
  return { TOKEN, $, api, fmt, base, el, isLibrary };
})();
