// Live progress of a run, without reloading: the page names its run in data-run.
(function () {
  var el = document.querySelector("[data-run]");
  if (!el) return;
  var id = el.getAttribute("data-run");
  function size(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function set(name, text) {
    var n = document.getElementById(name);
    if (n) n.textContent = text;
  }
  function poll() {
    fetch("/api/runs/" + id, { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (r) {
        set("run-status", r.status);
        set("run-reason", r.reason || "");
        if (r.progress) {
          var p = r.progress, bar = document.getElementById("run-bar");
          if (p.total_bytes > 0 || p.total_files > 0) {
            set("run-percent", (p.percent_done * 100).toFixed(1) + "%");
            set("run-bytes", size(p.bytes_done) + " / " + size(p.total_bytes) + ", " +
              p.files_done + " / " + p.total_files + " files");
            if (bar) bar.value = p.percent_done;
          } else {
            // No total (a restore of a part of a snapshot): what is done so far, no share of it.
            set("run-percent", "-");
            set("run-bytes", size(p.bytes_done) + ", " + p.files_done + " files");
            if (bar) bar.removeAttribute("value");
          }
        }
        set("run-eta", r.eta_seconds == null ? "" : Math.round(r.eta_seconds) + "s left");
        if (r.live) setTimeout(poll, 1000);
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  poll();
})();
