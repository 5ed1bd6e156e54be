// ntkbook: previews of references on a touch screen. sphinx-tippy shows a reference's preview
// (figure, table, equation, section) when the mouse is over it; a finger has no hover, and a tap
// on the link would jump away. Here the first tap on a reference shows its preview and stays on the
// page; a second tap on the same reference, while its preview shows, follows the link; a tap
// anywhere else closes the preview (tippy's hideOnClick). A mouse click follows the link at once.
(function () {
  "use strict";
  var touch = false;       // the pointer of the click under way is a finger or a pen
  var wasShown = false;    // the preview of the tapped link was open when the finger came down
  document.addEventListener("pointerdown", function (e) {
    touch = e.pointerType === "touch" || e.pointerType === "pen";
    var link = e.target.closest ? e.target.closest("a") : null;
    wasShown = !!(link && link._tippy && link._tippy.state.isVisible);
  }, true);
  document.addEventListener("click", function (e) {
    if (!touch) { return; }
    var link = e.target.closest ? e.target.closest("a") : null;
    var tip = link && link._tippy;
    if (!tip || wasShown) { return; }
    e.preventDefault();
    tip.show();
  }, true);
})();
