"use strict";
// The page talks only to this server: /languages, /frontend/settings, POST /translate and POST /translate_file,
// by relative URLs, so it works where a proxy serves the server under a sub-path (TRANSDUCE_ROOT_PATH).
// Errors are shown in plain words; the API's own precise message follows in small print.
const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "transduce.api_key";
let languages = [];
let settings = {
  char_limit: 5000, max_queue_items: 1024, model: "", api_key_required: false,
  supportedFilesFormat: [".txt", ".md", ".html", ".htm", ".docx"], max_file_bytes: 2000000, max_file_chars: 100000,
  request_timeout_s: 30,
};
// How long past the server's own deadline (request_timeout_s: it answers 504 then) the page waits for an answer:
// the network, and for a file its upload. A connection that dropped silently would otherwise leave the page
// "Translating…" with its buttons off for ever.
const ANSWER_MARGIN_S = { text: 10, file: 60 };
let busy = { text: false, file: false };  // one request of each kind at a time; a text and a file may overlap
let translatedFrom = null;  // the input text the output translates (swap moves the output only while it still does)
let translatedInto = null;  // the target language it was translated into
let detectedSource = null;  // the language detected for it under "Detect language"
let loaded = false;  // languages and settings loaded: the controls work

const isMac = /Mac|iPhone|iPad/.test((navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform);

function showError(message, detail = "", keepOutput = false) {
  const el = $("error");
  $("error-text").textContent = message;
  $("error-detail").textContent = detail ? `Details: ${detail}` : "";
  el.hidden = !message;
  if (message && !keepOutput) {  // never leave an old translation up beside an error (a hint leaves it)
    $("output").value = "";
    translatedFrom = translatedInto = detectedSource = null;
    $("detected").textContent = "";
    $("file-link").hidden = true;
  }
  if (message && el.scrollIntoView) el.scrollIntoView({ block: "nearest" });
}

function formatBytes(n) {
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)} kB`;
  return `${n} bytes`;
}

function fileTypes() {  // ".txt, .md, .html, .htm or .docx"
  const types = settings.supportedFilesFormat;
  return types.length > 1 ? `${types.slice(0, -1).join(", ")} or ${types[types.length - 1]}` : types.join("");
}

function fileSuffix(name) {
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot).toLowerCase() : "";
}

// What an error on a file means to someone using the page (the API's message is kept as the detail).
function humanFileError(status, name) {
  if (status === 413) {
    return `This file is too large: this server translates files of up to ${formatBytes(settings.max_file_bytes)} ` +
      `and ${settings.max_file_chars} characters of text. Split it and send the parts.`;
  }
  if (status === 400 && !settings.supportedFilesFormat.includes(fileSuffix(name))) {
    return `This file type is not supported: choose a ${fileTypes()} file.`;
  }
  if (status === 400 || status === 422) return "The server could not read or translate this file.";
  if (status === 408) return "The file took too long to upload. Check the connection and try again.";
  if (status === 504) return "The file took too long to translate. Try a smaller file.";
  return humanError(status, "");
}

// What an error status means to someone using the page; the API's message is kept as the detail.
function humanError(status, detail) {
  if (status === 413 && /max_queue_items/.test(detail)) {  // sentences, not characters: the counter may be fine
    return `The text has too many sentences or lines: this server translates up to ${settings.max_queue_items} ` +
      "in one request. Split it and send the parts.";
  }
  if (status === 413) return `The text is too long: this server translates up to ${settings.char_limit} characters at a time.`;
  if (status === 401 || status === 403) return "This server needs a valid API key: enter it above.";
  if (status === 429) return "Too many requests from here in the last minute. Please wait a moment and try again.";
  if (status === 503) return "The server is busy or still starting. Please try again in a few seconds.";
  if (status === 504) return "The translation took too long. Try a shorter text.";
  if (status === 400 || status === 422) return "The server could not translate this text.";
  return `Something went wrong on the server (status ${status}). Please try again.`;
}

function languageName(code) {
  const lang = languages.find((l) => l.code === code);
  return lang ? lang.name : code;
}

function setStatus(message) {
  $("status").textContent = message;
}

function fillTargets(keep) {
  const auto = $("source").value === "auto";  // every language some source translates into
  const src = languages.find((l) => l.code === $("source").value);
  const targets = auto ? [...new Set(languages.flatMap((l) => l.targets))].sort() : src ? src.targets : [];
  const select = $("target");
  select.innerHTML = "";
  for (const code of targets) {
    const lang = languages.find((l) => l.code === code);
    select.add(new Option(lang ? lang.name : code, code));
  }
  if (keep && targets.includes(keep)) select.value = keep;
}

function updateCounter() {
  const n = [...$("input").value].length;  // characters as the server counts them (an emoji is one, not two)
  const el = $("counter");
  el.textContent = `${n} / ${settings.char_limit}`;
  el.classList.toggle("over", n > settings.char_limit);
  el.title = n > settings.char_limit ? "Over the server's character limit" : "";
}

// Seconds the page waits for an answer of ``kind``, or null: the server keeps no deadline it states (none, or one
// past what a browser timer can hold, about 24 days).
function answerWithin(kind) {
  const deadline = settings.request_timeout_s;
  const seconds = typeof deadline === "number" ? deadline + ANSWER_MARGIN_S[kind] : NaN;
  return Number.isFinite(seconds) && seconds * 1000 <= 2 ** 31 - 1 ? seconds : null;
}

// POST and read the JSON answer ({} if it is none), giving up (an AbortError) when the server has not answered
// within its deadline and the margin for ``kind``.
async function postWithin(kind, url, options) {
  const seconds = answerWithin(kind);
  const controller = new AbortController();
  const timer = seconds === null ? null : setTimeout(() => controller.abort(), seconds * 1000);
  try {
    const response = await fetch(url, { ...options, method: "POST", signal: controller.signal });
    const answer = await response.json().catch((err) => { if (err.name === "AbortError") throw err; return {}; });
    return { response, answer };
  } finally {
    clearTimeout(timer);
  }
}

function unreachable(kind, err) {
  if (err.name !== "AbortError") {
    showError("Could not reach the server. Check the connection and try again.", err.message);
    return;
  }
  const seconds = Math.round(answerWithin(kind) * 10) / 10;
  showError(`The server did not answer within ${seconds} s. Try again in a moment.`,
    "no answer: the connection may have dropped");
}

async function translate() {
  if (busy.text || !ready()) return;
  const q = $("input").value;
  if (!q.trim()) { $("output").value = ""; showError(""); return; }
  const body = { q, source: $("source").value, target: $("target").value, format: "text" };
  const key = $("api-key").value.trim();
  if (key) body.api_key = key;
  busy.text = true;
  $("translate").disabled = $("swap").disabled = true;  // a swap now would put the answer under other languages
  showError("");
  setStatus("Translating…");
  const started = performance.now();
  try {
    const { response, answer } = await postWithin("text", "translate", {
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      showError(humanError(response.status, answer.error || ""), answer.error || "");
      setStatus(`Model ${settings.model}`);
      return;
    }
    $("output").value = answer.translatedText;
    translatedFrom = q;
    translatedInto = body.target;
    const found = answer.detectedLanguage;
    detectedSource = found ? found.language : null;
    $("detected").textContent = found ? `Detected: ${languageName(found.language)} (${Math.round(found.confidence)} %)` : "";
    const ms = Math.round(performance.now() - started);
    setStatus(`Translated in ${ms} ms · model ${settings.model}`);
  } catch (err) {
    unreachable("text", err);
    setStatus("");
  } finally {
    busy.text = false;
    $("translate").disabled = $("swap").disabled = false;
  }
}

// Until the languages and settings are loaded the controls would send empty languages and count against a guessed
// limit: they are disabled in the page and enabled here, once.
function ready() {
  return loaded;
}

function enableControls() {
  for (const id of ["translate", "translate-file", "swap"]) $(id).disabled = false;
}

function showTab(name) {
  const file = name === "file";
  $("tab-text").setAttribute("aria-selected", String(!file));
  $("tab-file").setAttribute("aria-selected", String(file));
  $("tab-text").tabIndex = file ? -1 : 0;  // one tab stop: the selected tab
  $("tab-file").tabIndex = file ? 0 : -1;
  $("text-pane").hidden = file;
  $("text-actions").hidden = file;
  $("file-pane").hidden = !file;
  showError("");
}

async function translateFile() {
  const file = $("file").files[0];
  if (!file) { showError("Choose a file to translate first."); return; }
  if (busy.file || !ready()) return;
  if (file.size > settings.max_file_bytes + 16384) {  // the server would refuse it after the upload: say so now
    showError(humanFileError(413, file.name), `${file.name} is ${formatBytes(file.size)}`);
    return;
  }
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  const key = $("api-key").value.trim();
  if (key) form.append("api_key", key);
  busy.file = true;
  $("translate-file").disabled = true;
  $("file-link").hidden = true;
  showError("");
  setStatus(`Translating ${file.name}…`);
  try {
    const { response, answer } = await postWithin("file", "translate_file", { body: form });
    if (!response.ok) {
      showError(humanFileError(response.status, file.name), answer.error || "");
      setStatus(`Model ${settings.model}`);
      return;
    }
    const link = $("file-link");
    link.href = answer.translatedFileUrl;
    link.textContent = `Download ${decodeURIComponent(answer.translatedFileUrl.split("/").pop())}`;
    link.hidden = false;
    const found = answer.detectedLanguage;
    const detected = found ? ` from ${languageName(found.language)} (detected)` : "";
    setStatus(`${file.name} translated${detected} · the download is kept for a few minutes`);
  } catch (err) {
    unreachable("file", err);
    setStatus("");
  } finally {
    busy.file = false;
    $("translate-file").disabled = false;
  }
}

function swap() {
  const target = $("target").value;
  // under "Detect language", the language detected for the translation shown, if any
  const current = translatedFrom === $("input").value && translatedInto === target;  // the output is of this text
  const source = $("source").value === "auto" && detectedSource && current ? detectedSource : $("source").value;
  if (source === "auto") {
    showError("Choose the source language to swap it with the target.", "", true);  // a hint: the translation stays
    return;
  }
  const src = languages.find((l) => l.code === target);
  if (!src || !src.targets.includes(source)) {
    showError(`This server cannot translate ${languageName(target)} into ${languageName(source)}.`, "", true);
    return;
  }
  showError("");
  $("source").value = target;
  fillTargets(source);
  // the translation becomes the text only while it is the translation of what is there: edited text stays
  if ($("output").value && current) {
    $("input").value = $("output").value;
    updateCounter();
  }
  $("output").value = "";
  $("detected").textContent = "";
  translatedFrom = translatedInto = detectedSource = null;
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
    const response = await fetch("languages");
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
    const conf = await fetch("frontend/settings");
    if (conf.ok) settings = { ...settings, ...(await conf.json()) };
  } catch (err) {
    showError("Could not load the languages from the server.", err.message);
    return;
  }
  if (settings.api_key_required) {
    $("key-field").hidden = false;
    $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  }
  $("source").add(new Option("Detect language", "auto"));
  for (const lang of languages.filter((l) => l.targets.length)) $("source").add(new Option(lang.name, lang.code));
  if (languages.some((l) => l.code === "en" && l.targets.length)) $("source").value = "en";
  fillTargets();
  updateCounter();
  $("file").accept = settings.supportedFilesFormat.join(",");
  $("file-hint").textContent = `A ${fileTypes()} file of up to ${formatBytes(settings.max_file_bytes)}, ` +
    "translated with the languages chosen above; the translation keeps the file's layout.";
  setStatus(`Model ${settings.model} · ready`);
  loaded = true;
  enableControls();
}

// The tabs as the ARIA tab pattern has them: one tab stop, the arrow keys (and Home, End) move between them.
function tabKeys(e) {
  if (e.altKey || e.ctrlKey || e.metaKey) return;  // Alt+Left is the browser's Back
  const order = ["text", "file"];
  const now = $("tab-file").getAttribute("aria-selected") === "true" ? 1 : 0;
  const next = { ArrowRight: now + 1, ArrowLeft: now - 1, Home: 0, End: order.length - 1 }[e.key];
  if (next === undefined) return;
  e.preventDefault();
  const name = order[(next + order.length) % order.length];
  showTab(name);
  $(`tab-${name}`).focus();
}

$("source").addEventListener("change", () => { fillTargets($("target").value); showError(""); });
$("swap").addEventListener("click", swap);
$("tab-text").addEventListener("click", () => showTab("text"));
$("tab-file").addEventListener("click", () => showTab("file"));
$("tab-text").addEventListener("keydown", tabKeys);
$("tab-file").addEventListener("keydown", tabKeys);
$("translate-file").addEventListener("click", translateFile);
$("translate").addEventListener("click", translate);
$("copy").addEventListener("click", copyOutput);
$("input").addEventListener("input", updateCounter);
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); translate(); }
});
$("api-key").addEventListener("change", () => localStorage.setItem(KEY_STORAGE, $("api-key").value.trim()));
init();
