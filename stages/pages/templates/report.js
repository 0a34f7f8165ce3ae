(function () {
  "use strict";
  var statusBox = document.getElementById("filter-status");
  var textBox = document.getElementById("filter-problem");
  var failedBox = document.getElementById("filter-failed");
  var counter = document.getElementById("shown-count");
  var panel = document.getElementById("step-view");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#grid tr.problem"));
  var inflated = {};

  function applyFilters() {
    var status = statusBox.value, text = textBox.value.trim().toLowerCase(), failedOnly = failedBox.checked, shown = 0;
    rows.forEach(function (row) {
      var visible = (!failedOnly || row.dataset.failed === "1")
        && (!status || row.dataset.statuses.split(" ").indexOf(status) >= 0)
        && (!text || row.dataset.search.indexOf(text) >= 0);
      row.hidden = !visible;
      if (visible) { shown += 1; }
      Array.prototype.forEach.call(row.querySelectorAll("a.cell"), function (cell) {
        var wanted = status ? cell.dataset.status === status : (!failedOnly || cell.dataset.status !== "pass");
        cell.classList.toggle("dim", !wanted);
      });
    });
    counter.textContent = shown + " of " + rows.length + " problems";
  }

  // The views of one step (every attempt) are stored gzip-compressed; inflate them once, when first opened.
  function stepViews(stepId) {
    if (inflated[stepId]) { return Promise.resolve(inflated[stepId]); }
    var data = document.getElementById("z-" + stepId);
    if (!data) { return Promise.resolve(null); }
    var binary = atob(data.textContent.trim()), bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i += 1) { bytes[i] = binary.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (html) {
      var holder = document.createElement("template");
      holder.innerHTML = html;
      inflated[stepId] = holder.content;
      return holder.content;
    });
  }

  function openStep() {
    var id = decodeURIComponent(location.hash.slice(1));
    var match = /^s-(.+)-a(\d+)$/.exec(id);
    if (!match) { return; }
    stepViews(match[1]).then(function (views) {
      var template = views && views.getElementById("t-" + id);
      if (!template) { panel.textContent = "No view of " + id + " in this report."; return; }
      panel.replaceChildren(template.content.cloneNode(true));
      panel.dataset.step = id;
      Array.prototype.forEach.call(document.querySelectorAll("a.cell.current"), function (c) { c.classList.remove("current"); });
      var cell = document.querySelector('a.cell[href="#' + CSS.escape(id) + '"]');
      if (cell) { cell.classList.add("current"); }
      panel.scrollIntoView({block: "start"});
    });
  }

  [statusBox, failedBox].forEach(function (box) { box.addEventListener("change", applyFilters); });
  textBox.addEventListener("input", applyFilters);
  window.addEventListener("hashchange", openStep);
  applyFilters();
  openStep();
}());
