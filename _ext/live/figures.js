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

  // A cost model the reader drives (workers/render.py's model_explorer): each collective's
  // time = steps * alpha + share * bytes / beta, with (steps, share) per rank count as the
  // page computed them in Python.
  function drawModel(box) {
    if (box.dataset.drawn) return;
    const holder = box.querySelector("script.live-model-data");
    if (!holder) return;
    box.dataset.drawn = "1";
    const spec = JSON.parse(holder.textContent);
    const names = Object.keys(spec.terms);
    const inputs = {};
    box.querySelectorAll(".live-model-inputs input").forEach((i) => { inputs[i.name] = i; });
    const plot = box.querySelector(".live-model-plot");
    const readout = box.querySelector(".live-model-readout");
    const us = (seconds) => (seconds * 1e6).toLocaleString("en", { maximumFractionDigits: 1 });

    function update() {
      const alpha = parseFloat(inputs.alpha.value) * 1e-6;
      const beta = parseFloat(inputs.beta.value) * 1e9;
      const ranks = String(Math.round(parseFloat(inputs.ranks.value)));
      const size = parseFloat(inputs.size.value);
      if (!(alpha >= 0) || !(beta > 0) || !(size > 0) || !(ranks in spec.terms[names[0]])) {
        readout.textContent = "Give α ≥ 0 µs, β > 0 GB/s, a message of at least 1 byte and "
          + "N from 2 to " + Object.keys(spec.terms[names[0]]).pop() + ".";
        return;
      }
      const sizes = spec.sizes.concat([size]).sort((a, b) => a - b);
      const data = names.map((name, i) => {
        const [steps, share] = spec.terms[name][ranks];
        return { type: "scatter", mode: "lines", name: name, x: sizes,
                 y: sizes.map((n) => (steps * alpha + share * n / beta) * 1e6),
                 line: { color: spec.colours[i] },
                 hovertemplate: "<b>" + name + "</b><br>%{x} bytes: %{y:.4g} µs, predicted"
                   + "<extra></extra>" };
      });
      data.push({ type: "scatter", mode: "markers", name: "your message", showlegend: false,
                  x: names.map(() => size), hoverinfo: "skip",
                  y: names.map((name) => {
                    const [steps, share] = spec.terms[name][ranks];
                    return (steps * alpha + share * size / beta) * 1e6;
                  }), marker: { color: spec.colours.slice(0, names.length), size: 9 } });
      const layout = {
        height: 380, margin: { l: 60, r: 10, t: 30, b: 45 }, hovermode: "closest",
        title: { text: "predicted at N = " + ranks + " (never measured)", font: { size: 13 } },
        xaxis: { title: { text: "message size (bytes)" }, type: "log" },
        yaxis: { title: { text: "µs, predicted" }, type: "log" },
        paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
        font: { color: textColour(box) },
      };
      Plotly.react(plot, data, layout,
                   Object.assign({ toImageButtonOptions: { filename: spec.name } }, config));
      readout.textContent = "At " + size.toLocaleString("en") + " bytes and N = " + ranks
        + ", predicted: " + names.map((name) => {
          const [steps, share] = spec.terms[name][ranks];
          const latency = steps * alpha, bytes = share * size / beta;
          return name + " " + us(latency + bytes) + " µs (" + us(latency) + " of latency, "
            + us(bytes) + " of bytes: " + (latency > bytes ? "latency" : "bandwidth")
            + "-bound)";
        }).join("; ") + ".";
      box.dataset.ranks = ranks;
    }

    function preset() {
      inputs.alpha.value = Number(spec.alpha_us.toPrecision(4));
      inputs.beta.value = Number(spec.beta_gbs.toPrecision(4));
      inputs.ranks.value = spec.ranks;
      update();
    }

    Object.values(inputs).forEach((input) => input.addEventListener("input", update));
    box.querySelector("button[data-preset]").addEventListener("click", preset);
    box.querySelector(".live-model-inputs").hidden = false;
    plot.hidden = false;
    readout.hidden = false;
    box.classList.add("live-figure-drawn");
    update();
    box.liveRecolour = () => Plotly.relayout(plot, { "font.color": textColour(box) });
  }

  function drawAll() {
    document.querySelectorAll(".live-figure").forEach(draw);
    document.querySelectorAll(".live-model").forEach(drawModel);
  }

  drawAll();
  new MutationObserver(drawAll).observe(document.body, { childList: true, subtree: true });
  // light and dark: the axes' text follows the page's
  new MutationObserver(() => {
    document.querySelectorAll(".live-figure-drawn").forEach((box) => box.liveRecolour());
  }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
})();
