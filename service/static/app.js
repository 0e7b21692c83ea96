"use strict";
// The page talks only to this server: /languages, /frontend/settings and POST /translate.
const $ = (id) => document.getElementById(id);
let languages = [];
let settings = { char_limit: 5000, model: "" };

function showError(message) {
  const el = $("error");
  el.textContent = message;
  el.hidden = !message;
}

function fillTargets(keep) {
  const src = languages.find((l) => l.code === $("source").value);
  const targets = src ? src.targets : [];
  const select = $("target");
  select.innerHTML = "";
  for (const code of targets) {
    const lang = languages.find((l) => l.code === code);
    select.add(new Option(lang ? lang.name : code, code));
  }
  if (keep && targets.includes(keep)) select.value = keep;
}

function updateCounter() {
  const n = $("input").value.length;
  const el = $("counter");
  el.textContent = `${n} / ${settings.char_limit}`;
  el.classList.toggle("over", n > settings.char_limit);
}

async function translate() {
  const q = $("input").value;
  if (!q.trim()) { $("output").value = ""; showError(""); return; }
  const button = $("translate");
  button.disabled = true;
  showError("");
  const started = performance.now();
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ q, source: $("source").value, target: $("target").value, format: "text" }),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      showError(body.error || `The server answered ${response.status}.`);
      return;
    }
    $("output").value = body.translatedText;
    const ms = Math.round(performance.now() - started);
    $("status").textContent = `Translated in ${ms} ms · model ${settings.model}`;
  } catch (err) {
    showError(`Could not reach the server: ${err.message}`);
  } finally {
    button.disabled = false;
  }
}

function swap() {
  const source = $("source").value;
  const target = $("target").value;
  const src = languages.find((l) => l.code === target);
  if (!src || !src.targets.includes(source)) { showError(`No model translates ${target} → ${source}.`); return; }
  $("source").value = target;
  fillTargets(source);
  if ($("output").value) { $("input").value = $("output").value; $("output").value = ""; updateCounter(); }
}

async function init() {
  try {
    const [langs, conf] = await Promise.all([fetch("/languages"), fetch("/frontend/settings")]);
    if (!langs.ok) throw new Error((await langs.json()).error || `status ${langs.status}`);
    languages = await langs.json();
    if (conf.ok) settings = await conf.json();
  } catch (err) {
    showError(`Could not load the languages: ${err.message}`);
    return;
  }
  for (const lang of languages) $("source").add(new Option(lang.name, lang.code));
  if (languages.some((l) => l.code === "en")) $("source").value = "en";
  fillTargets();
  updateCounter();
  $("status").textContent = `Model ${settings.model} · ready`;
}

$("source").addEventListener("change", () => fillTargets($("target").value));
$("swap").addEventListener("click", swap);
$("translate").addEventListener("click", translate);
$("input").addEventListener("input", updateCounter);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
});
$("copy").addEventListener("click", async () => {
  try { await navigator.clipboard.writeText($("output").value); $("status").textContent = "Copied."; }
  catch { $("output").select(); document.execCommand("copy"); }
});
init();
