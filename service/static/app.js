"use strict";
// The page talks only to this server: /languages, /frontend/settings and POST /translate.
const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "transduce.api_key";
let languages = [];
let settings = { char_limit: 5000, model: "", api_key_required: false };
let busy = false;

const isMac = /Mac|iPhone|iPad/.test((navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform);

function showError(message) {
  const el = $("error");
  el.textContent = message;
  el.hidden = !message;
  if (message && el.scrollIntoView) el.scrollIntoView({ block: "nearest" });
}

function setStatus(message) {
  $("status").textContent = message;
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
  el.title = n > settings.char_limit ? "Over the server's character limit" : "";
}

async function translate() {
  if (busy) return;
  const q = $("input").value;
  if (!q.trim()) { $("output").value = ""; showError(""); return; }
  const body = { q, source: $("source").value, target: $("target").value, format: "text" };
  const key = $("api-key").value.trim();
  if (key) body.api_key = key;
  busy = true;
  $("translate").disabled = true;
  showError("");
  setStatus("Translating…");
  const started = performance.now();
  try {
    const response = await fetch("/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      showError(answer.error || `The server answered ${response.status}.`);
      setStatus(`Model ${settings.model}`);
      return;
    }
    $("output").value = answer.translatedText;
    const ms = Math.round(performance.now() - started);
    setStatus(`Translated in ${ms} ms · model ${settings.model}`);
  } catch (err) {
    showError(`Could not reach the server: ${err.message}`);
    setStatus("");
  } finally {
    busy = false;
    $("translate").disabled = false;
  }
}

function swap() {
  const source = $("source").value;
  const target = $("target").value;
  const src = languages.find((l) => l.code === target);
  if (!src || !src.targets.includes(source)) { showError(`No model translates ${target} → ${source}.`); return; }
  showError("");
  $("source").value = target;
  fillTargets(source);
  if ($("output").value) { $("input").value = $("output").value; $("output").value = ""; updateCounter(); }
}

async function copyOutput() {
  const text = $("output").value;
  if (!text) return;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    $("output").select();
    if (!document.execCommand("copy")) { showError("Copying was refused by the browser: select the text instead."); return; }
  }
  setStatus("Translation copied to the clipboard.");
}

// /languages answers 503 while the model is still loading: wait (Retry-After) and ask again.
async function loadLanguages() {
  for (let attempt = 0; attempt < 120; attempt++) {
    const response = await fetch("/languages");
    if (response.ok) return response.json();
    if (response.status !== 503) {
      const answer = await response.json().catch(() => ({}));
      throw new Error(answer.error || `status ${response.status}`);
    }
    setStatus("The model is loading…");
    const wait = Math.min(5, Number(response.headers.get("Retry-After")) || 1);
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
  }
  throw new Error("the model did not finish loading");
}

async function init() {
  $("shortcut").textContent = isMac ? "⌘+Enter" : "Ctrl+Enter";
  try {
    languages = await loadLanguages();  // first: the model name is known once the model has loaded
    const conf = await fetch("/frontend/settings");
    if (conf.ok) settings = { ...settings, ...(await conf.json()) };
  } catch (err) {
    showError(`Could not load the languages: ${err.message}`);
    return;
  }
  if (settings.api_key_required) {
    $("key-field").hidden = false;
    $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  }
  for (const lang of languages) $("source").add(new Option(lang.name, lang.code));
  if (languages.some((l) => l.code === "en")) $("source").value = "en";
  fillTargets();
  updateCounter();
  setStatus(`Model ${settings.model} · ready`);
}

$("source").addEventListener("change", () => fillTargets($("target").value));
$("swap").addEventListener("click", swap);
$("translate").addEventListener("click", translate);
$("copy").addEventListener("click", copyOutput);
$("input").addEventListener("input", updateCounter);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
});
$("api-key").addEventListener("change", () => localStorage.setItem(KEY_STORAGE, $("api-key").value.trim()));
init();
