// Leroy's one script (CSP: script-src 'self'): copy buttons and confirmations; every page works without it.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  navigator.clipboard.writeText(source.textContent.trim()).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Select and copy by hand"; },
  );
});
document.addEventListener("submit", (event) => {
  const form = event.target;
  const message = form.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
    return;
  }
  // A second click while the first submission is on its way would make a second key or alert whose secret is
  // never shown: the form goes once, until the page is left.
  if (form.dataset.submitted) {
    event.preventDefault();
    return;
  }
  form.dataset.submitted = "1";
});
window.addEventListener("pageshow", (event) => {
  if (event.persisted) document.querySelectorAll("form[data-submitted]").forEach((form) => delete form.dataset.submitted);
});
