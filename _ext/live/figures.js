/* Draw the page's interactive figures (workers/render.py's interactive()) with plotly.js,
   served from the site. Each figure's data is in its own <script type="application/json">;
   tabs switch between its variants. Figures that a live cell outputs later are drawn too. */
(function () {
  "use strict";
  if (!window.Plotly) return;  // the static image stays
  const config = { displaylogo: false, responsive: true,
                   modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };

  function textColour(box) { return getComputedStyle(box).color; }

  function draw(box) {
    if (box.dataset.drawn) return;
    const holder = box.querySelector("script.live-figure-data");
    if (!holder) return;
    box.dataset.drawn = "1";
    const spec = JSON.parse(holder.textContent);
    const plot = box.querySelector(".live-figure-plot");
    const tabs = box.querySelector(".live-figure-tabs");
    const link = box.querySelector(".live-figure-trace");
    const buttons = Array.from(tabs.querySelectorAll("button[data-variant]"));

    function show(index) {
      const variant = spec.variants[index];
      const layout = Object.assign({}, variant.layout, {
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
        font: { color: textColour(box) },
      });
      Plotly.react(plot, variant.data, layout,
                   Object.assign({ toImageButtonOptions: { filename: spec.name } }, config));
      buttons.forEach((button, i) => button.setAttribute("aria-selected", String(i === index)));
      if (link && variant.trace) {
        link.href = variant.trace;
        link.download = variant.file;
      }
      box.dataset.variant = variant.label;
    }

    buttons.forEach((button, i) => button.addEventListener("click", () => show(i)));
    tabs.hidden = spec.variants.length < 2;
    plot.hidden = false;
    box.classList.add("live-figure-drawn");
    show(0);
    box.liveRecolour = () => Plotly.relayout(plot, { "font.color": textColour(box) });
    // follow the width of the figure's column (a live cell's output area, a folded sidebar)
    let width = box.clientWidth;
    new ResizeObserver(() => {
      if (box.clientWidth !== width && plot.offsetParent !== null) {
        width = box.clientWidth;
        Plotly.Plots.resize(plot);
      }
    }).observe(box);
  }

  function drawAll() { document.querySelectorAll(".live-figure").forEach(draw); }

  drawAll();
  new MutationObserver(drawAll).observe(document.body, { childList: true, subtree: true });
  // light and dark: the axes' text follows the page's
  new MutationObserver(() => {
    document.querySelectorAll(".live-figure-drawn").forEach((box) => box.liveRecolour());
  }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
})();
