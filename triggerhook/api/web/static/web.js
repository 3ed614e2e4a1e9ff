// triggerhook web view: refreshes the engine figures every 2 s from
// /ui/figures.json and asks before a cancel. The page works without it.
"use strict";

(function () {
  const PERIOD_MS = 2000;
  const box = document.getElementById("figures");

  async function refresh() {
    try {
      const answer = await fetch(box.dataset.src, {
        headers: { Accept: "application/json" },
        cache: "no-store",
        credentials: "same-origin",
      });
      if (!answer.ok) {
        throw new Error("HTTP " + answer.status);
      }
      const texts = (await answer.json()).figures;
      for (const element of box.querySelectorAll("[data-figure]")) {
        const text = texts[element.dataset.figure];
        if (typeof text === "string") {
          element.textContent = text;
        }
      }
      box.dataset.state = "live";
      box.dataset.refreshes = String(Number(box.dataset.refreshes || "0") + 1);
    } catch (error) {
      box.dataset.state = "stale"; // shown by the stylesheet; tried again next period
    }
  }

  if (box !== null) {
    window.setInterval(refresh, PERIOD_MS);
  }

  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  }
})();
