/* Run this page live: its code cells become editors that run in a kernel of the Jupyter
   server that scripts/live.py starts on the reader's own machine (see _ext/live_pages.py).
   Thebe comes from the site (_thebe/); the server's address and token from _live/server.json,
   which only that command serves. */
(function () {
  "use strict";
  // The key to the live server comes in the address scripts/live.py prints, after "#": kept
  // in this browser for this site, and taken out of the address bar.
  const KEY = "book-live-token";
  const given = location.hash.match(/live-token=([^&]+)/);
  if (given) {
    localStorage.setItem(KEY, decodeURIComponent(given[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const bar = document.querySelector(".live-bar");
  if (!bar) return;
  const root = document.documentElement.dataset.content_root || "";
  const start = bar.querySelector(".live-start");
  const interrupt = bar.querySelector(".live-interrupt");
  const status = bar.querySelector(".live-status");
  const say = (text) => { status.textContent = text; };

  function load(tag, attributes) {
    return new Promise((resolve, reject) => {
      const element = Object.assign(document.createElement(tag), attributes);
      element.onload = resolve;
      element.onerror = () => reject(new Error("cannot load " + (attributes.src || attributes.href)));
      document.head.appendChild(element);
    });
  }

  async function serverInfo() {
    try {
      const response = await fetch(root + "_live/server.json", { cache: "no-store" });
      if (response.ok) return await response.json();
    } catch (error) { /* not served over HTTP by the live command */ }
    return null;
  }

  async function keyAccepted(info, token) {
    try {
      const response = await fetch(info.url + "api/status",
                                   { headers: { Authorization: "token " + token } });
      return response.ok;
    } catch (error) {
      return false;
    }
  }

  /* Each visible code cell gets a plain <pre> with its code for Thebe to replace with an
     editor, and exactly one output placeholder (Thebe pairs cells and outputs in order). */
  function markCells() {
    let count = 0;
    document.querySelectorAll(".bd-article div.cell").forEach((cell) => {
      const input = cell.querySelector(".cell_input");
      const code = input && input.querySelector("pre");
      if (!code || input.closest("div.cell") !== cell) return;
      const source = document.createElement("pre");
      source.setAttribute("data-live-cell", "");
      source.textContent = code.textContent.replace(/\n$/, "");
      input.replaceChildren(source);
      let output = Array.from(cell.children)
        .find((child) => child.classList.contains("cell_output"));
      if (!output) {
        output = document.createElement("div");
        output.className = "cell_output docutils container";
        cell.appendChild(output);
      }
      output.setAttribute("data-live-output", "");
      cell.classList.add("live-cell");
      count += 1;
    });
    return count;
  }

  async function goLive() {
    start.disabled = true;
    say("Looking for the live server...");
    const info = await serverInfo();
    if (!info) {
      bar.querySelector(".live-not-served").hidden = false;
      status.hidden = true;
      start.disabled = false;
      return;
    }
    const token = localStorage.getItem(KEY);
    if (!token || !(await keyAccepted(info, token))) {
      say("The live server does not know this page's key: open the address that " +
          "scripts/live.py printed (it carries the key), then come back here.");
      start.disabled = false;
      return;
    }
    try {
      if (!window.thebe || !window.thebe.bootstrap) {
        await Promise.all([
          load("link", { rel: "stylesheet", href: root + "_thebe/thebe.css" }),
          load("script", { src: root + "_thebe/index.js" }),
        ]);
      }
    } catch (error) {
      say("Thebe is not part of this build: run scripts/fetch_thebe.py, then build the " +
          "book again.");
      start.disabled = false;
      return;
    }
    // sphinx-thebe's page configuration asks for Binder: this page uses its own server
    document.querySelectorAll("script[type='text/x-thebe-config']").forEach((el) => el.remove());
    const cells = markCells();
    say("Starting a kernel...");
    const page = location.pathname.split("/").pop() || "index.html";
    try {
      const { session } = await window.thebe.bootstrap({
        useBinder: false, useJupyterLite: false, requestKernel: true,
        mountStatusWidget: false, mountActivateWidget: false,
        mountRunButton: true, mountRunAllButton: false,
        mountRestartButton: true, mountRestartAllButton: false,
        selector: "[data-live-cell]", outputSelector: "[data-live-output]",
        predefinedOutput: true,
        mathjaxUrl: "",  // never cdnjs
        codeMirrorConfig: { theme: "default", mode: "python", lineNumbers: false },
        serverSettings: { baseUrl: info.url, wsUrl: info.url.replace(/^http/, "ws"),
                          token: token, appendToken: true },
        kernelOptions: { kernelName: "python3",
                         path: info.path + "/" + page.replace(/\.html$/, ".ipynb") },
      });
      const kernel = session.kernel || (session.connection && session.connection.kernel);
      bar.liveKernel = kernel;
      say("Importing what the page uses...");
      const preamble = bar.dataset.preamble || "";
      const reply = preamble
        ? await kernel.requestExecute({ code: preamble, silent: true }).done : null;
      interrupt.disabled = false;
      bar.classList.add("live-on");
      if (reply && reply.content.status !== "ok") {
        say("Live, but the page's imports failed in the kernel: " + reply.content.ename +
            ": " + reply.content.evalue);
      } else {
        say("Live: " + cells + " cells run on your machine (Shift-Enter or 'run'). " +
            "Interrupt stops a running cell and every process it started.");
      }
    } catch (error) {
      // the cells are editors already: a second try needs the page afresh
      say("Could not start a kernel (" + error + "): reload the page to try again.");
    }
  }

  start.addEventListener("click", goLive);
  interrupt.addEventListener("click", async () => {
    if (!bar.liveKernel) return;
    say("Interrupting...");
    try {
      await bar.liveKernel.interrupt();
      say("Interrupted: the running cell stopped, and the processes it started with it.");
    } catch (error) {
      say("Could not interrupt: " + error);
    }
  });
})();
