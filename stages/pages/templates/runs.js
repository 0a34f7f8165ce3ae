(function () {
  "use strict";
  var table = document.getElementById("runs");
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.querySelectorAll("tr.run"));
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var textBox = document.getElementById("filter-model");
  var counter = document.getElementById("shown-count");

  function applyFilters() {
    var text = textBox.value.trim().toLowerCase(), shown = 0;
    rows.forEach(function (row) {
      var visible = selects.every(function (select) {
        return !select.value || row.dataset[select.dataset.filter] === select.value;
      }) && (!text || row.dataset.search.indexOf(text) >= 0);
      row.hidden = !visible;
      if (visible) { shown += 1; }
      Array.prototype.forEach.call(document.querySelectorAll('g.point[data-row="' + CSS.escape(row.id) + '"]'),
        function (point) { point.classList.toggle("dim", !visible); });
    });
    counter.textContent = shown + " of " + rows.length + " runs";
  }

  function sortBy(header) {
    var index = Array.prototype.indexOf.call(header.parentNode.children, header);
    var numeric = header.dataset.type === "num";
    var order = header.dataset.order === "asc" ? "desc" : "asc";
    Array.prototype.forEach.call(table.querySelectorAll("th.sortable"), function (th) { delete th.dataset.order; });
    header.dataset.order = order;
    var sorted = rows.slice().sort(function (a, b) {
      var x = a.children[index].dataset.value, y = b.children[index].dataset.value;
      var result = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
      return order === "asc" ? result : -result;
    });
    sorted.forEach(function (row) { body.appendChild(row); });
  }

  selects.forEach(function (select) { select.addEventListener("change", applyFilters); });
  textBox.addEventListener("input", applyFilters);
  Array.prototype.forEach.call(table.querySelectorAll("th.sortable"), function (th) {
    th.addEventListener("click", function () { sortBy(th); });
  });
  applyFilters();
}());
