(function () {
  "use strict";
  var statusBox = document.getElementById("filter-status");
  var textBox = document.getElementById("filter-problem");
  var failedBox = document.getElementById("filter-failed");
  var counter = document.getElementById("shown-count");
  var panel = document.getElementById("step-view");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#grid tr.problem"));

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

  function openStep() {
    var id = decodeURIComponent(location.hash.slice(1));
    if (id.indexOf("s-") !== 0) { return; }
    var template = document.getElementById("t-" + id);
    if (!template) { return; }
    panel.replaceChildren(template.content.cloneNode(true));
    Array.prototype.forEach.call(document.querySelectorAll("a.cell.current"), function (c) { c.classList.remove("current"); });
    var cell = document.querySelector('a.cell[href="#' + CSS.escape(id) + '"]');
    if (cell) { cell.classList.add("current"); }
    panel.scrollIntoView({block: "start"});
  }

  [statusBox, failedBox].forEach(function (box) { box.addEventListener("change", applyFilters); });
  textBox.addEventListener("input", applyFilters);
  window.addEventListener("hashchange", openStep);
  applyFilters();
  openStep();
}());
