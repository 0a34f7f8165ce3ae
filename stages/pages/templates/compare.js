(function () {
  "use strict";
  var box = document.getElementById("show-unchanged");
  if (!box) { return; }
  box.addEventListener("change", function () {
    document.body.classList.toggle("compact", !box.checked);
  });
}());
